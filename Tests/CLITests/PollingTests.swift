import Foundation
import Testing

/// Polling where inotify is blind (docs/spec.md §10), on a real FUSE file system: a bindfs mount of
/// a directory, written underneath as another machine writes a share. inotify on the mount sees
/// only what goes through it; `auto` finds FUSE with statfs and polls.
@Suite(.serialized) struct PollingTests {
    /// A bindfs mount over a fresh directory, the sync directory made through it; nil (the reason
    /// printed) where FUSE or bindfs is missing or mounting is not allowed.
    final class Mount {
        let base: String
        var under: String { base + "/under" }
        var mount: String { base + "/mount" }

        init?(tree: Bool = false) throws {
            guard FileManager.default.fileExists(atPath: "/dev/fuse") else {
                print("PollingTests skipped: no /dev/fuse on this machine")
                return nil
            }
            guard let bindfs = ["/usr/bin/bindfs", "/bin/bindfs"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
                print("PollingTests skipped: bindfs is not installed (apt-get install bindfs)")
                return nil
            }
            var template = Array((FileManager.default.temporaryDirectory.path + "/basket-sync-fuse-XXXXXX").utf8CString)
            guard mkdtemp(&template) != nil else { throw CocoaError(.fileWriteUnknown) }
            base = String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
            for folder in [base + "/under", base + "/mount"] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
            guard mountCommand([base + "/under", base + "/mount"], program: bindfs) else {
                print("PollingTests skipped: bindfs could not mount (FUSE needs root or the fuse group)")
                try? FileManager.default.removeItem(atPath: base)
                return nil
            }
            let made = try basketSync(["-C", mount, "init"] + (tree ? ["--tree"] : []))
            #expect(made.status == 0, "\(made.stderr)")
            // Looked at every 50 ms: the test waits less, the rule is the same.
            let settings = try String(contentsOfFile: under + "/basket-sync.json", encoding: .utf8)
            try settings.replacingOccurrences(of: "\"pollIntervalMs\": 1000", with: "\"pollIntervalMs\": 50").write(toFile: under + "/basket-sync.json", atomically: true, encoding: .utf8)
        }

        /// Writes a file underneath the mount as a host on another machine would: a temporary
        /// name, then a rename.
        func writeUnderneath(_ relative: String, _ text: String) throws {
            let path = under + "/" + relative
            try text.write(toFile: path + ".tmp-under", atomically: false, encoding: .utf8)
            guard rename(path + ".tmp-under", path) == 0 else { throw CocoaError(.fileWriteUnknown) }
        }

        func records(_ relative: String) -> [[String: Any]] {
            ((try? String(contentsOfFile: under + "/" + relative, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }

        deinit {
            if !mountCommand(["-u", mount], program: "/bin/fusermount") { mountCommand([mount], program: "/bin/umount") }
            try? FileManager.default.removeItem(atPath: base)
        }
    }

    /// `auto` finds FUSE, says so, polls, and takes a cart and an inbox event written underneath.
    @Test func autoPollsAFUSEMountAndTakesWhatIsWrittenUnderneath() async throws {
        guard let mount = try Mount() else { return }
        let agent = try AgentProcess(directory: mount.mount, environment: ["BASKET_SYNC_WATCH_MODE": ""])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("polling every 50 ms") && agent.log.contains("is on fuse"), "\(agent.log)")
        try mount.writeUnderneath("inbox/new/e1", "{\"id\":\"e1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":2}]}\n")
        try await eventually("the event written underneath reaches the outbox") { mount.records("outbox.jsonl").count == 1 }
        try mount.writeUnderneath("cart.json", cartJSON([("A", 2), ("X", 1)], syncedThrough: 1))
        try await eventually("the cart written underneath is notified") { mount.records("notifications.jsonl").last.map(products) == ["A": 2] }
        // status says how the agent watches.
        let status = try basketSync(["-C", mount.mount, "status"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
        #expect(status.stdout.contains("polling every 50 ms"), "\(status.stdout)")
        #expect(agent.stop() == 0)
    }

    /// A database on the mount is said at the agent's start and in `status`, with the way out;
    /// moved to a local directory named by `"database"`, it is used from there and nothing is said.
    @Test func aDatabaseOnTheMountIsSaidAndGoesOnFromALocalDisk() async throws {
        guard let mount = try Mount() else { return }
        let agent = try AgentProcess(directory: mount.mount, environment: ["BASKET_SYNC_WATCH_MODE": ""])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("state.db is on fuse, a network or userspace file system") && agent.log.contains("set \"database\""), "\(agent.log)")
        try mount.writeUnderneath("inbox/new/e1", "{\"id\":\"e1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":2}]}\n")
        try await eventually("the event reaches the outbox") { mount.records("outbox.jsonl").count == 1 }
        func databaseWarning() throws -> Any? {
            let status = try basketSync(["-C", mount.mount, "status", "--json"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
            return ((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["database"] as? [String: Any])?["warning"]
        }
        #expect(try databaseWarning() is String)
        #expect(agent.stop() == 0)

        // The way out: the database moved to a local directory, the setting names it.
        let local = mount.base + "/local-db"
        #expect(mkdir(local, 0o700) == 0)
        for name in try FileManager.default.contentsOfDirectory(atPath: mount.under + "/.basket-sync") where name.hasPrefix("state.db") {
            try FileManager.default.moveItem(atPath: mount.under + "/.basket-sync/" + name, toPath: local + "/" + name)
        }
        let settings = try String(contentsOfFile: mount.under + "/basket-sync.json", encoding: .utf8)
        try settings.replacingOccurrences(of: "\"database\": null", with: "\"database\": \"\(local)\"").write(toFile: mount.under + "/basket-sync.json", atomically: true, encoding: .utf8)
        let again = try AgentProcess(directory: mount.mount, environment: ["BASKET_SYNC_WATCH_MODE": ""])
        try await again.waitUntilWatching()
        #expect(!again.log.contains("network or userspace file system"), "\(again.log)")
        try mount.writeUnderneath("inbox/new/e2", "{\"id\":\"e2\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"B\",\"quantity\":1}]}\n")
        try await eventually("it goes on after record 1") { mount.records("outbox.jsonl").last?["seq"] as? Int == 2 }
        #expect(try databaseWarning() is NSNull)
        #expect(again.stop() == 0)
    }

    /// A tree on FUSE: the root is polled, a cart directory made underneath is adopted, its cart
    /// and an event in its inbox taken; `status` on the root says the carts are polled.
    @Test func aTreeOnAFUSEMountIsPolledCartsMadeUnderneathAdopted() async throws {
        guard let mount = try Mount(tree: true) else { return }
        let agent = try AgentProcess(directory: mount.mount, environment: ["BASKET_SYNC_WATCH_MODE": ""])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("polled every 50 ms") && agent.log.contains("is on fuse"), "\(agent.log)")
        for folder in ["c1", "c1/inbox", "c1/inbox/new", "c1/inbox/tmp"] {
            try FileManager.default.createDirectory(atPath: mount.under + "/" + folder, withIntermediateDirectories: true)
        }
        try mount.writeUnderneath("c1/cart.json", cartJSON([("X", 1)]))
        try await eventually("the cart made underneath is adopted and notified") { mount.records("c1/notifications.jsonl").count == 1 }
        try mount.writeUnderneath("c1/inbox/new/e1", "{\"id\":\"e1\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}\n")
        try await eventually("its event reaches its outbox") { mount.records("c1/outbox.jsonl").count == 1 }
        let status = try basketSync(["-C", mount.mount, "status"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
        #expect(status.stdout.contains("watch: polling every 50 ms"), "\(status.stdout)")
        // A new interval on SIGHUP applies to the tree's polled carts.
        let settings = try String(contentsOfFile: mount.under + "/basket-sync.json", encoding: .utf8)
        try settings.replacingOccurrences(of: "\"pollIntervalMs\": 50", with: "\"pollIntervalMs\": 120").write(toFile: mount.under + "/basket-sync.json", atomically: true, encoding: .utf8)
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the new interval is in force") { agent.log.contains("looked at every 120 ms from now on") }
        try mount.writeUnderneath("c1/cart.json", cartJSON([("A", 1), ("X", 2)], syncedThrough: 1))
        try await eventually("a change is still seen") { mount.records("c1/notifications.jsonl").count == 2 }
        #expect(agent.stop() == 0)
    }

    /// `status` says how the running agent watches (its `--poll`, not
    /// what `status`'s own environment would choose), and once no agent runs, what one would.
    @Test func statusSaysHowTheRunningAgentWatches() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=300"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
        try await agent.waitUntilWatching()
        let running = try basketSync(["-C", playground.path, "status"], environment: ["BASKET_SYNC_WATCH_MODE": "inotify"])
        #expect(running.stdout.contains("watch: polling every 300 ms (--poll=300) (the agent, pid \(agent.process.processIdentifier))"), "\(running.stdout)")
        let json = try basketSync(["-C", playground.path, "status", "--json"])
        let watch = (try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["watch"] as? [String: Any]
        let runningAgent = watch?["agent"] as? [String: Any]
        #expect(runningAgent?["pid"] as? Int == Int(agent.process.processIdentifier) && (runningAgent?["description"] as? String)?.hasPrefix("polling every 300 ms") == true, "\(json.stdout)")
        #expect(agent.stop() == 0)
        let stopped = try basketSync(["-C", playground.path, "status"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
        #expect(stopped.stdout.contains("watch: no agent runs; one started now would use inotify"), "\(stopped.stdout)")
        let stoppedJSON = try basketSync(["-C", playground.path, "status", "--json"], environment: ["BASKET_SYNC_WATCH_MODE": ""])
        let stoppedWatch = (try JSONSerialization.jsonObject(with: Data(stoppedJSON.stdout.utf8)) as? [String: Any])?["watch"] as? [String: Any]
        #expect(stoppedWatch?["agent"] is NSNull && stoppedWatch?["mode"] as? String == "inotify", "\(stoppedJSON.stdout)")
    }

    /// In a polled tree, a one-shot `push` and `sync` on a cart
    /// (which touches its marker) are seen, and the batch they made is rolled back on time.
    @Test func aPolledTreeRollsBackABatchAOneShotMade() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: "\"pendingTimeoutSeconds\": 10", with: "\"pendingTimeoutSeconds\": 1")
        try playground.writeAtomically("basket-sync.json", settings)
        for id in ["c1", "c2"] {
            try FileManager.default.createDirectory(at: playground.url(id), withIntermediateDirectories: true)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", 1)]))
        }
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=50"])
        try await agent.waitUntilWatching()
        // The agent stopped meanwhile: the one-shot takes the event and makes the batch, the
        // agent learns of it only by the marker the one-shot touched.
        // Stopped inside one of its short transactions (a flush noted), it holds the database:
        // the one-shot then waits it out and says so (75); stopped again, until it is between.
        for id in ["c1", "c2"] {
            #expect(try basketSync(["-C", "\(playground.path)/\(id)", "push", "A=+1"]).status == 0)
        }
        var synced: [Int32] = []
        for _ in 0..<5 {
            kill(agent.process.processIdentifier, SIGSTOP)
            synced = try ["c1", "c2"].map { try basketSync(["-C", "\(playground.path)/\($0)", "sync"]).status }
            if !synced.contains(75) { break }
            kill(agent.process.processIdentifier, SIGCONT)
            usleep(200_000)
        }
        #expect(synced == [0, 0], "\(synced)")
        kill(agent.process.processIdentifier, SIGCONT)
        try await eventually("both batches are rolled back by the agent") {
            try basketSync(["-C", playground.path, "status"]).stdout.contains("pending batches: none")
        }
        // status on one cart names the tree's agent.
        let cart = try basketSync(["-C", "\(playground.path)/c1", "status"])
        #expect(cart.stdout.contains("(the agent, pid \(agent.process.processIdentifier))"), "\(cart.stdout)")
        #expect(agent.stop() == 0)
    }

    /// `wait` on a polled directory looks once an interval — its
    /// own connection's files closing must not wake it into a busy loop.
    @Test func waitOnAPolledDirectoryDoesNotSpin() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.writeAtomically("basket-sync.json", playground.read("basket-sync.json").replacingOccurrences(of: "\"mode\": \"auto\", \"pollIntervalMs\": 1000", with: "\"mode\": \"poll\", \"pollIntervalMs\": 100"))
        let waiter = try startedInBackground(["-C", playground.path, "wait", "--after", "0", "--timeout", "2"])
        // Its CPU time (user + system, in clock ticks) as it waits out its 2 s.
        var ticks = 0
        while waiter.isRunning {
            let stat = (try? String(contentsOfFile: "/proc/\(waiter.processIdentifier)/stat", encoding: .utf8)) ?? ""
            if let close = stat.lastIndex(of: ")") {
                let fields = stat[stat.index(after: close)...].split(separator: " ")
                if fields.count > 13 { ticks = max(ticks, (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)) }
            }
            usleep(20_000)
        }
        waiter.waitUntilExit()
        #expect(waiter.terminationStatus == 75)
        // A look each 100 ms costs a few ms of CPU in 2 s; a busy loop costs most of the 2 s.
        #expect(ticks < Int(sysconf(Int32(_SC_CLK_TCK))) / 2, "wait used \(ticks) clock ticks of CPU in 2 s")
    }

    /// A killed agent is not "the agent" (its lock is gone),
    /// even before its parent reaps it.
    @Test func statusDoesNotTakeAKilledAgentForTheAgent() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=300"])
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", playground.path, "status"]).stdout.contains("(the agent, pid"))
        kill(agent.process.processIdentifier, SIGKILL)
        try await eventually("the lock is released") {
            try basketSync(["-C", playground.path, "status"]).stdout.contains("watch: no agent runs")
        }
        agent.process.waitUntilExit()
    }

    /// Why the mode exists: forced to inotify on the same mount, the agent never sees the cart
    /// written underneath — it takes an event delivered through the mount after that write, and
    /// still has not read the cart.
    @Test func forcedToInotifyTheAgentMissesWhatIsWrittenUnderneath() async throws {
        guard let mount = try Mount() else { return }
        let agent = try AgentProcess(directory: mount.mount, environment: ["BASKET_SYNC_WATCH_MODE": "inotify"])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("inotify (BASKET_SYNC_WATCH_MODE)"), "\(agent.log)")
        try mount.writeUnderneath("cart.json", cartJSON([("A", 5)]))
        // After that write, an event through the mount: inotify sees this one.
        #expect(try basketSync(["-C", mount.mount, "push", "A=+1"]).status == 0)
        try await eventually("the event delivered through the mount reaches the outbox") { mount.records("outbox.jsonl").count == 1 }
        #expect(!mount.records("notifications.jsonl").contains { products($0)["A"] == 5 }, "the cart written underneath was seen: \(mount.records("notifications.jsonl"))")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A bad interval or mode is refused on every way in: `--poll=MS` with 64, the environment with 78,
    /// the configuration with 78 naming the line and column (`status` too: it reports with the
    /// defaults, says the configuration is broken, and exits 78); a sign or a space is not a number.
    @Test(arguments: ["5", "+100", "-100", " 100", "100ms", "3600001", ""])
    func aBadPollIntervalIsRefusedOnEveryWayIn(interval: String) throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let flag = try basketSync(["-C", playground.path, "watch", "--poll=\(interval)"])
        #expect(flag.status == 64, "--poll=\(interval): \(flag.status) \(flag.stderr)")
        #expect(flag.stderr.contains("--poll=MS takes a whole number of milliseconds from 10 to 3600000"), "\(flag.stderr)")
        let environment = try basketSync(["-C", playground.path, "watch"], environment: ["BASKET_SYNC_WATCH_MODE": "poll=\(interval)"])
        #expect(environment.status == 78, "a setting, as the configuration's: BASKET_SYNC_WATCH_MODE=poll=\(interval): \(environment.status) \(environment.stderr)")
        #expect(environment.stderr.contains("BASKET_SYNC_WATCH_MODE is auto, inotify, poll or poll=MS"), "\(environment.stderr)")
        // status says no agent could start so, rather than nothing.
        let said = try basketSync(["-C", playground.path, "status"], environment: ["BASKET_SYNC_WATCH_MODE": "poll=\(interval)"])
        #expect(said.stdout.contains("watch: no agent runs; none can start: BASKET_SYNC_WATCH_MODE is"), "\(said.stdout)")
        guard let number = Int(interval.trimmingCharacters(in: .whitespaces)) else { return }
        try playground.writeAtomically("basket-sync.json", playground.read("basket-sync.json").replacingOccurrences(of: "\"pollIntervalMs\": 1000", with: "\"pollIntervalMs\": \(number)"))
        let configured = try basketSync(["-C", playground.path, "status"])
        if (10...3_600_000).contains(number) {
            #expect(configured.status == 0, "pollIntervalMs \(number) is a good interval: \(configured.stderr)")
        } else {
            #expect(configured.status == 78, "pollIntervalMs \(number): \(configured.status) \(configured.stderr)")
            #expect(configured.stderr.contains("basket-sync.json:") && configured.stderr.contains("watch.pollIntervalMs"), "names the file, line and key: \(configured.stderr)")
            // status still reports (with the defaults) and says the configuration is broken.
            #expect(configured.stdout.contains("configuration: BROKEN") && configured.stdout.contains("watch: no agent runs; none can start"), "\(configured.stdout)")
        }
    }
}

extension PollingTests {
    /// A polled agent whose pass fails keeps its back-off. The poller looks again for 2 s at what
    /// changed (a write hidden in the same time tick); those looks must not run the failing pass
    /// at every look (40 errors in 10 s at 50 ms, "retrying in 30 s" said each 250 ms). Each error
    /// must come at least the delay it announced after the one before.
    @Test(arguments: [false, true])
    func aFailingPassKeepsItsBackOffWhenPolled(tree: Bool) async throws {
        let playground = try Playground()
        let outside = try Playground()
        try FileManager.default.createDirectory(atPath: outside.path + "/new", withIntermediateDirectories: true)
        try outside.write("new/e1", #"{"id":"e1","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#)
        let directory = tree ? playground.path + "/c1" : playground.path
        #expect(try basketSync(["-C", playground.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
        if tree {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
            #expect(FileManager.default.fileExists(atPath: directory + "/inbox/new"), "the cart is adopted")
        }
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=20", "--log-format", "json"])
        try await agent.waitUntilWatching()
        // inbox/new swapped for a link to a directory outside holding an event: refused at each pass.
        #expect(rename(directory + "/inbox/new", directory + "/inbox/new.away") == 0)
        #expect(symlink(outside.path + "/new", directory + "/inbox/new") == 0)
        try await eventually("the retry delay doubles up to 4 s", timeout: 90) { agent.log.contains("retrying in 4.0 s") }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var errors: [Date] = []
        var delays: [Double] = []
        for line in agent.log.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let message = object["message"] as? String, let at = (object["at"] as? String).flatMap(formatter.date(from:)) else { continue }
            if object["level"] as? String == "error", message.contains("symbolic link") { errors.append(at) }
            if let range = message.range(of: "retrying in ") { delays.append(Double(message[range.upperBound...].prefix { $0 != " " }) ?? -1) }
        }
        #expect(Array(delays.prefix(4)) == [0.5, 1, 2, 4], "\(delays)")
        #expect(errors.count >= 4, "\(agent.log)")
        for index in 1..<min(errors.count, delays.count + 1) {
            let gap = errors[index].timeIntervalSince(errors[index - 1])
            #expect(gap >= delays[index - 1] - 0.01, "error \(index + 1) came \(gap) s after the one before, which said retrying in \(delays[index - 1]) s")
        }
        #expect(outside.names("new") == ["e1"], "the event outside is never taken")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A polled agent rejects a cart that has become a FIFO once, not at every look for 2 s (100
    /// log lines and report rows at --poll=20): only what is written in place is looked at again.
    /// Waits past the 2 s, then counts.
    @Test func aFIFOCartIsRejectedOnceWhenPolled() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=20"])
        try await agent.waitUntilWatching()
        #expect(mkfifo(playground.path + "/x", 0o644) == 0)
        #expect(rename(playground.path + "/x", playground.path + "/cart.json") == 0)
        try await eventually("the FIFO cart is rejected") { agent.log.contains("cart rejected") }
        try await Task.sleep(nanoseconds: 3_000_000_000)  // past the 2 s a changed path is looked at again
        let rejections = agent.log.components(separatedBy: "cart rejected").count - 1
        #expect(rejections == 1, "\(rejections) rejections of one FIFO:\n\(agent.log)")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A one-shot command that commits on a tree cart touches the cart's marker, then the tree's
    /// commit signal: a polling agent looks at every marker only when that signal changed (each
    /// marker otherwise in its turn), so the signal must come after the marker, for each way a
    /// command commits — one cart, a tree's `sync` in groups, a cart given a store, a payment.
    @Test(arguments: ["payment-started", "sync-root", "sync-cart", "set-store"])
    func aOneShotCommitOnATreeCartTouchesItsMarkerThenTheTreeSignal(command: String) throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        for id in ["c1", "c2"] {
            try FileManager.default.createDirectory(at: playground.url(id), withIntermediateDirectories: true)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", 1)]))
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try playground.writeAtomically("c1/cart.json", cartJSON([("X", 2)]))
        let marker = playground.path + "/c1/.basket-sync-cart", signal = playground.path + "/.basket-sync/committed"
        // Both set in the past, so that each touch shows.
        #expect(FileManager.default.createFile(atPath: signal, contents: nil))
        for path in [marker, signal] {
            var old = [timespec(tv_sec: 1_577_836_800, tv_nsec: 0), timespec(tv_sec: 1_577_836_800, tv_nsec: 0)]
            #expect(utimensat(AT_FDCWD, path, &old, 0) == 0)
        }
        let arguments: [String] = switch command {
        case "payment-started": ["-C", playground.path + "/c1", "payment-started", "--total", "1.00"]
        case "sync-root": ["-C", playground.path, "sync"]
        case "sync-cart": ["-C", playground.path + "/c1", "sync"]
        default: ["-C", playground.path + "/c1", "set-store", "s1"]
        }
        let run = try basketSync(arguments)
        #expect(run.status == 0, "\(run.stderr)")
        func modified(_ path: String) -> Int64 {
            var info = stat()
            guard stat(path, &info) == 0 else { return 0 }
            return Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        }
        let (markerTime, signalTime) = (modified(marker), modified(signal))
        #expect(markerTime > 1_577_836_800_000_000_000, "\(command): the marker is touched")
        #expect(signalTime >= markerTime, "\(command): the tree's signal is touched after the marker (\(signalTime) < \(markerTime))")
    }
}

extension PollingTests {
    /// A polled tree cart whose folder is removed and made again between two looks: the first
    /// thing the agent does on it is to end the old cart (or take the folder on anew), never a
    /// pass of the old cart on the new folder.
    @Test func aPolledCartFolderMadeAgainBetweenTwoLooksEndsTheOldCartFirst() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        for id in ["c1", "c2"] {
            try FileManager.default.createDirectory(at: playground.url(id), withIntermediateDirectories: true)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", 1)]))
        }
        // Looks far apart (a marker's own turn comes every eight looks).
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=400"])
        try await agent.waitUntilWatching()
        try await eventually("the cart is taken") { playground.records("c1/notifications.jsonl").count == 1 }
        kill(agent.process.processIdentifier, SIGSTOP)
        try FileManager.default.removeItem(at: playground.url("c1"))
        try FileManager.default.createDirectory(at: playground.url("c1"), withIntermediateDirectories: true)
        try playground.writeAtomically("c1/cart.json", cartJSON([("X", 2)]))
        let before = agent.log.count
        kill(agent.process.processIdentifier, SIGCONT)
        try await eventually("the agent acts on c1 again") { agent.log.dropFirst(before).contains("cart c1:") }
        let first = agent.log.dropFirst(before).split(separator: "\n").first { $0.contains("cart c1:") }.map(String.init) ?? ""
        #expect(first.contains("its marker .basket-sync-cart is gone") || first.contains("its directory left the tree") || first.contains("the cart as it was is no longer served"), "the first thing done on the new folder: \(first)\n\(agent.log)")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A polled tree cart whose folder is renamed away whole (its marker and files with it) and
    /// another folder made under its name between two looks: the agent looks at the folder the
    /// name gives now, not at the one it held open — it sees the cart's marker gone there.
    @Test func aPolledCartFolderRenamedAwayIsLookedAtUnderItsName() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        for id in ["c1", "c2"] {
            try FileManager.default.createDirectory(at: playground.url(id), withIntermediateDirectories: true)
            try playground.writeAtomically("\(id)/cart.json", cartJSON([("X", 1)]))
        }
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=400"])
        try await agent.waitUntilWatching()
        try await eventually("the cart is taken") { playground.records("c1/notifications.jsonl").count == 1 }
        kill(agent.process.processIdentifier, SIGSTOP)
        #expect(rename(playground.url("c1").path, playground.url("kept").path) == 0)
        try FileManager.default.createDirectory(at: playground.url("c1"), withIntermediateDirectories: true)
        try playground.writeAtomically("c1/cart.json", cartJSON([("X", 2)]))
        let before = agent.log.count
        kill(agent.process.processIdentifier, SIGCONT)
        try await eventually("the agent acts on c1 again") { agent.log.dropFirst(before).contains("cart c1:") }
        let first = agent.log.dropFirst(before).split(separator: "\n").first { $0.contains("cart c1:") }.map(String.init) ?? ""
        #expect(first.contains("its marker .basket-sync-cart is gone") || first.contains("its directory left the tree") || first.contains("the cart as it was is no longer served"), "the first thing done on the new folder: \(first)\n\(agent.log)")
        // The folder renamed away keeps what it had: nothing of the new folder's cart went there.
        #expect(playground.records("kept/notifications.jsonl").count == 1, "\(agent.log)")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A burst is taken in delivery order where no reports place the entries: a polled inbox, and
    /// the start pass, which lists `new/` while the burst lands (a listing made while renames land
    /// misses some and shows later ones, so a look takes only what was renamed in before its
    /// listing began and leaves the rest to the next look). 3,000 events renamed one after
    /// another — at start, half of them waiting already — the order of renames being the order of
    /// the events' ids.
    @Test(arguments: ["polled", "start"]) func aBurstWithoutReportsIsTakenInDeliveryOrder(when: String) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let inbox = playground.path + "/inbox"
        let total = 3_000
        // Maildir names (a burst shares change times) whose order as text is not the delivery
        // order (M99 sorts after M100): the change time, then the time a name carries.
        let names = (0..<total).map { "1796000000.M\($0)P1Q\($0).test" }
        for (index, name) in names.enumerated() {
            try Data("{\"id\":\"evt-\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\",\"quantity\":1}]}".utf8)
                .write(to: URL(fileURLWithPath: inbox + "/tmp/" + name))
        }
        var agent: AgentProcess
        if when == "polled" {
            agent = try AgentProcess(directory: playground.path, arguments: ["--poll=20"])
            try await agent.waitUntilWatching()
            for name in names { #expect(rename(inbox + "/tmp/" + name, inbox + "/new/" + name) == 0) }
        } else {
            for name in names.prefix(total / 2) { #expect(rename(inbox + "/tmp/" + name, inbox + "/new/" + name) == 0) }
            agent = try AgentProcess(directory: playground.path)
            for name in names.dropFirst(total / 2) { #expect(rename(inbox + "/tmp/" + name, inbox + "/new/" + name) == 0) }
        }
        try await eventually("every event is taken", timeout: 120) { playground.records("outbox.jsonl").count == total }
        let sources = playground.records("outbox.jsonl").map { $0["source"] as? String ?? "" }
        #expect(Set(sources).count == total, "every event once")
        let outOfOrder = zip(sources, sources.dropFirst()).first { Int($0.0.dropFirst(4)).map { $0 + 1 } != Int($0.1.dropFirst(4)) }
        #expect(outOfOrder == nil, "taken out of delivery order: \(outOfOrder.map { "\($0.0) then \($0.1)" } ?? "")")
        #expect(agent.stop() == 0)
    }
}

extension PollingTests {
    /// A host that renames a whole new cart into place faster than the looks (a shopper clicking,
    /// a host writing on every event) gets a version taken while it goes on — within two looks —
    /// rather than none until it stops: a look that finds another file than the look before
    /// found it twice in a row takes the one there. In a sync directory and in a tree's cart.
    @Test(arguments: [false, true])
    func aCartRenamedIntoPlaceFasterThanTheLooksIsTakenWhileItGoesOn(tree: Bool) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"] + (tree ? ["--tree"] : [])).status == 0)
        let cart = tree ? "c1/" : ""
        if tree { try FileManager.default.createDirectory(atPath: playground.path + "/c1", withIntermediateDirectories: false) }
        let agent = try AgentProcess(directory: playground.path, arguments: ["--poll=200"])
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", playground.path + "/" + cart, "push", "A=+1"]).status == 0)
        try await eventually("the push reaches the outbox") { playground.records(cart + "outbox.jsonl").count == 1 }
        // A new whole version every 40 ms, five a look, until one is notified (or 20 s).
        var version = 1
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, playground.records(cart + "notifications.jsonl").isEmpty {
            version += 1
            try playground.write(cart + ".cart.tmp", cartJSON([("A", version)], syncedThrough: 1))
            #expect(rename(playground.path + "/" + cart + ".cart.tmp", playground.path + "/" + cart + "cart.json") == 0)
            try await Task.sleep(nanoseconds: 40_000_000)
        }
        let notified = playground.records(cart + "notifications.jsonl")
        #expect(!notified.isEmpty, "no version taken in 20 s while the host renamed \(version - 1) versions into place: \(agent.log)")
        // What was taken is a version the host wrote.
        if let quantity = notified.first.map(products)?["A"] { #expect((2...version).contains(quantity), "\(notified)") }
        #expect(agent.stop() == 0)
    }
}
