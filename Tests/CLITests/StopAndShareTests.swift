import Foundation
import Testing
import TestSupport
import Seeded

/// Nothing holds the agent up, and no cart holds up another (docs/spec.md §7): SIGTERM is looked
/// at between events and between carts, and from the agent's first instant; a tree's cart takes
/// one group of events per turn.
@Suite struct StopAndShareTests {
    /// Writes `count` events into `directory/inbox/new/` (as deliveries made while no agent ran):
    /// valid deltas, or malformed ones.
    func deliver(_ count: Int, into directory: String, malformed: Bool = false) throws {
        let new = directory + "/inbox/new"
        try FileManager.default.createDirectory(atPath: new, withIntermediateDirectories: true)
        for index in 0..<count {
            let text = malformed ? "{\"id\": \"bad-\(index)\", \"type\": " : "{\"id\":\"evt-\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}"
            try Data(text.utf8).write(to: URL(fileURLWithPath: String(format: "%@/%010d.M%06dP1R%d.test", new, 1_796_000_000 + index / 1000, index % 1000, index)))
        }
    }

    func count(_ folder: String) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { !$0.hasPrefix(".") }.count
    }

    /// Blocks until the agent `pid` has started again without the backtracer (its environment
    /// says so): its first milliseconds, before it opened anything.
    func waitForReexec(_ pid: Int32) {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let environ = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/environ"))) ?? Data()
            if String(decoding: environ, as: UTF8.self).contains("SWIFT_BACKTRACE=enable=no") { return }
        }
    }

    /// 2,000 events waiting at the start, SIGTERM in the agent's first instant: the stop is
    /// looked at before each group of events, so the start pass takes none of them and the agent
    /// exits 0 — it neither dies of the signal nor runs the backlog to its end first; the next run
    /// takes them all, each once.
    @Test func sigtermStopsALongStartBetweenGroups() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        let total = 2_000
        try deliver(total, into: playground.path)
        let agent = try AgentProcess(directory: playground.path)
        waitForReexec(agent.process.processIdentifier)
        kill(agent.process.processIdentifier, SIGTERM)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationReason == .exit && agent.process.terminationStatus == 0, "\(agent.log)")
        let left = count(playground.path + "/inbox/new")
        #expect(left >= total - 256, "the start stopped before its next group: \(left) left")
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let seqs = playground.records("outbox.jsonl").compactMap { $0["seq"] as? Int }
        #expect(seqs == Array(1...total), "each event once: \(seqs.count) records")
    }

    /// CPU seconds process `pid` has run (user and system), from /proc.
    func cpuSeconds(_ pid: Int32) -> Double {
        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        // Fields after the command's closing parenthesis: state is the 3rd, utime the 14th, stime the 15th.
        let fields = stat.split(separator: ")").last?.split(separator: " ") ?? []
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A basket state of about 30 MB delivered to an idle agent, SIGTERM once the agent has spent
    /// a fifth of a second of CPU on it (a step of seconds, even built with optimizations): the
    /// agent exits 0 within a second of
    /// the signal — as a killed process stops, which every step is made to survive, and says so —
    /// the state still waiting; the next run takes it, once.
    @Test func sigtermDuringALongStepStopsTheAgentWithinASecondAndLosesNothing() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", #"{"limits": {"maxFileBytes": 67108864}}"#)
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        var parts = ["{\"id\":\"big\",\"type\":\"basketState\",\"products\":["]
        parts.reserveCapacity(900_001)
        for line in 0..<900_000 { parts.append((line == 0 ? "" : ",") + "{\"id\":\"s\(line)\",\"quantity\":\(1 + line % 5)}") }
        try Data((parts.joined() + "]}").utf8).write(to: URL(fileURLWithPath: playground.path + "/inbox/tmp/big"))
        let agent = try AgentProcess(directory: playground.path)
        let pid = agent.process.processIdentifier
        // Blocking waits: this test's own thread, not one the other tests may hold up.
        func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            while !condition() { if Date() > deadline { return false }; usleep(2_000) }
            return true
        }
        #expect(waitFor(60) { agent.log.contains("watching ") })
        let idle = cpuSeconds(pid)
        #expect(rename(playground.path + "/inbox/tmp/big", playground.path + "/inbox/new/big") == 0)
        #expect(waitFor(120) { cpuSeconds(pid) - idle >= 0.2 || !agent.process.isRunning }, "the agent works on the state")
        kill(pid, SIGTERM)
        agent.process.waitUntilExit()
        #expect(agent.process.terminationReason == .exit && agent.process.terminationStatus == 0, "\(agent.log.suffix(400))")
        #expect(agent.log.contains("the step in hand did not end within a second"), "\(agent.log.suffix(400))")
        #expect(count(playground.path + "/inbox/new") == 1, "the state left waiting")
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(playground.records("outbox.jsonl").compactMap { $0["source"] as? String } == ["big"])
    }

    /// SIGTERM as soon as the agent has started again without the backtracer (its first
    /// milliseconds, before it opened anything): it waits for the agent's handler, which stops it
    /// with exit 0 — never killed by the signal (143).
    @Test func sigtermInTheAgentsFirstInstantsStopsItCleanly() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        for _ in 0..<5 {
            let agent = try AgentProcess(directory: playground.path)
            waitForReexec(agent.process.processIdentifier)
            kill(agent.process.processIdentifier, SIGTERM)
            agent.process.waitUntilExit()
            #expect(agent.process.terminationReason == .exit && agent.process.terminationStatus == 0,
                    "reason \(agent.process.terminationReason.rawValue), status \(agent.process.terminationStatus): \(agent.log)")
        }
    }

    /// A tree: cart `noisy` holds 3,000 malformed events, cart `quiet` a delivery and a cart
    /// to tell, both waiting when the agent starts: `quiet` is told before most of `noisy`'s
    /// backlog is set aside (each cart takes one group per turn; judged by the agent's own times:
    /// the notification's and the `.error` files'), and the backlog is all set aside in the end.
    @Test func oneCartsBacklogDelaysAnotherByOneTurnAtMost() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        try FileManager.default.createDirectory(atPath: playground.path + "/quiet", withIntermediateDirectories: true)
        try playground.writeAtomically("quiet/cart.json", cartJSON([("A", 1), ("X", 1)]))
        #expect(try basketSync(["-C", playground.path + "/quiet", "push", "A=+1"]).status == 0)
        let total = 3_000
        try deliver(total, into: playground.path + "/noisy", malformed: true)
        let agent = try AgentProcess(directory: playground.path)
        let bad = playground.path + "/noisy/inbox/bad"
        try await eventually("noisy's backlog is set aside", timeout: 300) {
            count(playground.path + "/noisy/inbox/new") == 0 && count(bad) >= 2 * total
        }
        #expect(agent.stop() == 0)
        let told = try #require(playground.records("quiet/notifications.jsonl").first?["at"] as? String)
        let toldAt = try #require(ISO8601DateFormatter.withFractions.date(from: told))
        let setAsideAfter = try FileManager.default.contentsOfDirectory(atPath: bad).filter { $0.hasSuffix(".error") }.filter { name in
            let modified = try FileManager.default.attributesOfItem(atPath: bad + "/" + name)[.modificationDate] as? Date ?? .distantPast
            return modified > toldAt
        }.count
        #expect(setAsideAfter > total / 2, "quiet was told at \(told), after \(total - setAsideAfter) of noisy's \(total) events")
    }

    /// Events delivered into a tree's cart while it works through a backlog (its budget per turn
    /// spent) are taken with it, each once, and none is left in `new/` waiting for another event:
    /// inotify reports each arrival once, so a turn that goes on with the backlog takes in what
    /// came since. Two bursts renamed into place the Maildir way, the second while the agent
    /// serves the first (stopped while the first lands, so that one wake-up finds it all). In a
    /// tree and in a sync directory, every event is taken in delivery order: a listing of `new/`
    /// made while renames land misses some and shows later ones, so only inotify's reports place
    /// an entry.
    @Test(arguments: [true, false]) func eventsDeliveredWhileABacklogIsServedAreAllTakenAndNoneIsLeft(tree: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
        let cart = tree ? "busy/" : ""
        let inbox = playground.path + "/\(cart)inbox"
        for folder in ["tmp", "new", "cur"] { try FileManager.default.createDirectory(atPath: inbox + "/" + folder, withIntermediateDirectories: true) }
        try playground.writeAtomically("\(cart)cart.json", cartJSON([]))
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let total = 5_000
        let names = (0..<total).map { String(format: "1796000000.M%06dP1Q%d.test", $0, $0) }
        for (index, name) in names.enumerated() {
            let text = "{\"id\":\"evt-\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}"
            try Data(text.utf8).write(to: URL(fileURLWithPath: inbox + "/tmp/" + name))
        }
        #expect(kill(agent.process.processIdentifier, SIGSTOP) == 0)
        for name in names.prefix(1_000) { #expect(rename(inbox + "/tmp/" + name, inbox + "/new/" + name) == 0) }
        #expect(kill(agent.process.processIdentifier, SIGCONT) == 0)
        for name in names.dropFirst(1_000) { #expect(rename(inbox + "/tmp/" + name, inbox + "/new/" + name) == 0) }
        try await eventually("every event is taken", timeout: 120) { playground.records("\(cart)outbox.jsonl").count == total }
        #expect(count(inbox + "/new") == 0)
        let sources = playground.records("\(cart)outbox.jsonl").map { $0["source"] as? String ?? "" }
        #expect(sources.sorted() == names.indices.map { "evt-\($0)" }.sorted(), "every event once")
        let outOfOrder = zip(sources, sources.dropFirst()).first { Int($0.0.dropFirst(4)).map { $0 + 1 } != Int($0.1.dropFirst(4)) }
        #expect(outOfOrder == nil, "taken out of delivery order: \(outOfOrder.map { "\($0.0) then \($0.1)" } ?? "")")
        #expect(agent.stop() == 0)
    }

    /// A tree whose 8 carts all change in one wake-up, each a 12 MB cart within `maxFileBytes`:
    /// their versions are taken in groups bounded by `maxFileBytes` together, as the inbox's are,
    /// so the agent's peak memory follows one group, not the number of carts (printed: the peak).
    @Test func manyLargeCartsInOneWakeUpAreTakenInGroupsBoundedByBytes() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        let ids = (1...8).map { "c\($0)" }
        for id in ids { try FileManager.default.createDirectory(atPath: playground.path + "/" + id, withIntermediateDirectories: true) }
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        // About 12 MB each, within the default maxFileBytes (16 MiB): written aside, then renamed.
        let lines = (0..<380_000).map { ("sku-\($0)", 1 + $0 % 7) }
        let text = cartJSON(lines)
        #expect(text.utf8.count < 16 << 20)
        for id in ids { try playground.write("\(id)/.cart.tmp", text) }
        // The agent stopped while they land: it finds them all in one wake-up.
        #expect(kill(agent.process.processIdentifier, SIGSTOP) == 0)
        for id in ids { #expect(rename(playground.path + "/\(id)/.cart.tmp", playground.path + "/\(id)/cart.json") == 0) }
        #expect(kill(agent.process.processIdentifier, SIGCONT) == 0)
        try await eventually("every cart is notified", timeout: 300) {
            ids.allSatisfy { !playground.records("\($0)/notifications.jsonl").isEmpty }
        }
        let status = (try? String(contentsOfFile: "/proc/\(agent.process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        print("peak resident: \(peak) kB for \(ids.count) carts of \(text.utf8.count) bytes")
        #expect(peak > 0 && peak < 600_000, "peak \(peak) kB: the carts of a wake-up were held together")
        #expect(agent.stop() == 0)
    }

    /// A polled cart written in place in two writes (same length, 700 ms apart, within the
    /// 2-second interval): the agent takes it once it stood still for an interval — never the
    /// half-written version ({A:2, Z:1}, a cart that never existed) — and takes the whole one.
    @Test func aPolledCartIsTakenOnlyOnceItStoodStill() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1", "Z=+1"]).status == 0)
        func cart(_ a: Int, _ z: Int) -> String { "{\"products\":[{\"id\":\"A\",\"quantity\":\(a)},{\"id\":\"Z\",\"quantity\":\(z)}],\"syncedThrough\":1}\n" }
        try playground.write("cart.json", cart(1, 1))
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=2000"])
        try await agent.waitUntilWatching()
        try await eventually("the first cart is told") { playground.records("notifications.jsonl").contains { products($0) == ["A": 1, "Z": 1] } }
        for round in 2...4 {
            // The last version was taken at a look just now: the next look is two seconds away,
            // and falls between the two writes.
            usleep(1_600_000)
            let whole = Array(cart(round, round).utf8)
            let split = whole.count / 2
            let fd = open(playground.path + "/cart.json", O_WRONLY)
            #expect(fd >= 0 && whole[..<split].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == split)
            usleep(700_000)
            #expect(whole[split...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == whole.count - split)
            close(fd)
            try await eventually("round \(round) is told", timeout: 60) { playground.records("notifications.jsonl").contains { products($0) == ["A": round, "Z": round] } }
        }
        let told = playground.records("notifications.jsonl").map(products)
        #expect(!told.contains { $0["A"] != $0["Z"] }, "a half-written cart was taken: \(told)")
        #expect(agent.stop() == 0)
    }
}

extension ISO8601DateFormatter {
    /// The records' `at`: ISO 8601 with milliseconds.
    static var withFractions: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}

extension StopAndShareTests {
    /// Two passes at once over one inbox (a cron `sync` beside another, or beside the agent):
    /// seeded deliveries of valid events, redeliveries of their ids under other names and
    /// malformed events, both passes run together, round after round. From the SPEC's words:
    /// every entry set aside in `bad/` has its `.error` beside it; `cur/` holds taken +
    /// duplicates (each delivery counted once, whichever pass took it); `status` counts in
    /// `bad/` what is there; every id is taken once.
    @Test func twoPassesAtOnceCountEachDeliveryOnceAndSetAsideEachWithItsReason() async throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        var delivered = 0, malformed = 0, malformedBefore = 0
        var ids = Set<String>()
        for round in 0..<3 {
            for _ in 0..<120 {
                delivered += 1
                let name = String(format: "%010d.M%06dP1R%d.race", 1_796_000_000 + round, delivered, delivered)
                let text: String
                switch rng.next() % 4 {
                case 0:
                    malformed += 1
                    text = "{\"id\":\"bad-\(delivered)\",\"type\":"
                default:
                    // Ids drawn from a small set: many are redeliveries.
                    let id = "e\(rng.next() % 40)"
                    ids.insert(id)
                    text = "{\"id\":\"\(id)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}"
                }
                try playground.write("inbox/tmp/\(name)", text)
                #expect(rename(playground.path + "/inbox/tmp/\(name)", playground.path + "/inbox/new/\(name)") == 0)
            }
            let outputs = (0..<2).map { playground.path + "/../pass-\(round)-\($0)-\(UUID().uuidString).json" }
            defer { for output in outputs { try? FileManager.default.removeItem(atPath: output) } }
            let passes = try outputs.map { try startedInBackground(["-C", playground.path, "sync", "--json"], output: $0) }
            for pass in passes { pass.waitUntilExit() }
            let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), round \(round + 1)"
            // What the passes report adds up to what was delivered: each entry reported by the
            // one pass that took it.
            var reported = ["taken": 0, "duplicates": 0, "bad": 0]
            for output in outputs {
                let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
                let inbox = (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])?["inbox"] as? [String: Int] ?? [:]
                for key in reported.keys { reported[key]! += inbox[key] ?? 0 }
            }
            let bad = playground.names("inbox/bad")
            let setAside = bad.filter { !$0.hasSuffix(".error") && !$0.hasPrefix(".") }
            #expect(setAside.count == malformed, "\(context): \(setAside.count) set aside of \(malformed) malformed")
            #expect(setAside.allSatisfy { bad.contains("\($0).error") }, "\(context): set aside without its reason: \(setAside.filter { !bad.contains("\($0).error") }.prefix(5))")
            let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as? [String: Any]
            let inbox = status?["inbox"] as? [String: Any]
            let taken = inbox?["taken"] as? Int ?? -1, duplicates = inbox?["duplicates"] as? Int ?? -1
            #expect(taken == ids.count, "\(context): \(taken) taken of \(ids.count) ids")
            #expect(taken + duplicates == playground.names("inbox/cur").count && taken + duplicates == delivered - malformed, "\(context): taken \(taken) + duplicates \(duplicates), cur/ \(playground.names("inbox/cur").count), valid deliveries \(delivered - malformed)")
            #expect(inbox?["bad"] as? Int == malformed, "\(context): \(String(describing: inbox))")
            #expect(reported["taken"]! + reported["duplicates"]! + reported["bad"]! == 120 && reported["bad"]! == malformed - malformedBefore, "\(context): the passes reported \(reported) for 120 deliveries, \(malformed - malformedBefore) malformed")
            malformedBefore = malformed
        }
        #expect(playground.records("outbox.jsonl").count == ids.count, "seed \(seed): each id's record once")
    }
}
