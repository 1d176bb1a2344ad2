import Foundation
import Testing
import TestSupport

/// docs/spec.md §12: `status` says whether the agent is alive and making progress — its
/// heartbeat, a stopped process, a stale heartbeat — the oldest waiting event, and every current
/// error on its own.
@Suite struct HealthTests {
    /// `status --json`'s health; `clockStep`: with its wall clock stepped by that many seconds.
    func health(_ directory: String, clockStep: Int? = nil) throws -> [String: Any] {
        var environment: [String: String] = [:]
        if let clockStep {
            let file = directory + "/../clock-step-\(UUID().uuidString)"
            try String(clockStep).write(toFile: file, atomically: true, encoding: .utf8)
            environment = ["LD_PRELOAD": FaultTests.shim, "FAULTSHIM_CLOCK": file]
        }
        let status = try basketSync(["-C", directory, "status", "--json"], environment: environment)
        let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        return report?["health"] as? [String: Any] ?? [:]
    }

    /// A running agent beats; SIGSTOPped, it is reported stopped at once, and running again once
    /// continued.
    /// A heartbeat setting out of range or not a number is said and the default kept: the agent
    /// neither crashes (a huge value overflowed a timeout) nor beats thousands of times a second.
    @Test(arguments: ["1e7", "abc", "0", "-1", "inf"])
    func aBadHeartbeatSettingIsSaidAndTheDefaultKept(value: String) async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": value])
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("BASKET_SYNC_HEARTBEAT_SECONDS=\(value) ignored"), "\(agent.log)")
        #expect(try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+1"]).status == 0)
        try await eventually("the agent goes on") { playground.records("outbox.jsonl").count == 1 || !agent.process.isRunning }
        #expect(agent.process.isRunning, "\(agent.log)")
        var said = ""
        try await eventually("the agent's heartbeat is seen") {
            said = try basketSync(["-C", playground.path, "status", "--json"]).stdout
            let health = (try? JSONSerialization.jsonObject(with: Data(said.utf8)) as? [String: Any])?["health"] as? [String: Any]
            return health?["heartbeatSeconds"] as? Double != nil
        }
        let health = (try JSONSerialization.jsonObject(with: Data(said.utf8)) as? [String: Any])?["health"] as? [String: Any]
        #expect(health?["heartbeatSeconds"] as? Double == 60, "\(said.prefix(300))")
        #expect(agent.stop() == 0)
    }

    @Test func aStoppedAgentIsReportedStopped() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "1"])
        try await agent.waitUntilWatching()
        try await eventually("the agent's heartbeat is seen") { try health(playground.path)["heartbeatAt"] as? String != nil }
        let running = try health(playground.path)
        #expect(running["agentState"] as? String == "running" && running["agentPid"] as? Int == Int(agent.process.processIdentifier), "\(running)")
        #expect(running["lastWholePass"] as? String != nil, "\(running)")
        kill(agent.process.processIdentifier, SIGSTOP)
        defer { kill(agent.process.processIdentifier, SIGCONT) }
        try await eventually("the process shows stopped") { AgentStateLetter.of(agent.process.processIdentifier) == "T" }
        #expect(try health(playground.path)["agentState"] as? String == "stopped")
        let human = try basketSync(["-C", playground.path, "status"])
        #expect(human.stdout.contains("agent: STOPPED (pid \(agent.process.processIdentifier) is stopped"), "\(human.stdout)")
        kill(agent.process.processIdentifier, SIGCONT)
        try await eventually("running again") { try health(playground.path)["agentState"] as? String == "running" }
        #expect(agent.stop() == 0)
        #expect(try health(playground.path)["agentState"] as? String == "none")
    }

    /// An agent is known by its lock from its start: SIGSTOPped in its first pass (a backlog of
    /// events, before it has said how it watches), it is reported stopped at once, with its pid —
    /// never "none".
    @Test func anAgentStoppedInItsStartPassIsReportedStopped() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        for index in 0..<2_000 {
            try playground.write("inbox/new/\(1_796_000_000 + index).M\(index)P1Q\(index).test", "{\"id\":\"e\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"A\(index % 50)\",\"quantity\":1}]}\n")
        }
        let lock = playground.path + "/.basket-sync/agent.lock"
        let agent = try AgentProcess(directory: playground.path)
        let pid = agent.process.processIdentifier
        try await eventually("the agent holds its lock", timeout: 120) { lockHolders(lock).contains(pid) || !agent.process.isRunning }
        try #require(agent.process.isRunning, "the agent ended: \(agent.log)")
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        let inStartPass = !agent.log.contains("watching")
        try await eventually("the process shows stopped") { AgentStateLetter.of(pid) == "T" }
        let stopped = try health(playground.path)
        #expect(stopped["agentState"] as? String == "stopped" && stopped["agentPid"] as? Int == Int(pid), "in its start pass: \(inStartPass): \(stopped)")
        kill(pid, SIGCONT)
        try await agent.waitUntilWatching()
        let running = try health(playground.path)
        #expect(running["agentState"] as? String == "running" && running["agentPid"] as? Int == Int(pid), "\(running)")
        #expect(agent.stop() == 0)
    }

    /// The pids holding a flock on `path` (/proc/locks, read to its end: its size says 0).
    func lockHolders(_ path: String) -> [Int32] {
        var info = stat()
        guard stat(path, &info) == 0, let handle = FileHandle(forReadingAtPath: "/proc/locks") else { return [] }
        defer { try? handle.close() }
        guard let data = try? handle.readToEnd() else { return [] }
        let locks = String(decoding: data, as: UTF8.self)
        return locks.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", fields[5].split(separator: ":").last.flatMap({ UInt64($0) }) == UInt64(info.st_ino) else { return nil }
            return Int32(fields[4])
        }
    }

    /// An agent that cannot write its heartbeat (a process holds the database's write lock) is
    /// reported stuck once its heartbeat is older than two intervals, and running once it beats
    /// again.
    @Test func anAgentWithoutASignOfLifeIsReportedStuck() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "1"])
        try await agent.waitUntilWatching()
        try await eventually("the agent's heartbeat is seen") { try health(playground.path)["heartbeatAt"] as? String != nil }
        // The write lock held until `release` exists.
        let release = playground.path + "/release"
        defer { _ = FileManager.default.createFile(atPath: release, contents: nil) }
        let holder = Child()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = ["python3", "-c", """
            import os, sqlite3, sys, time
            db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
            db.execute("BEGIN IMMEDIATE")
            open(sys.argv[2] + ".held", "w").close()
            for _ in range(60000):
                if os.path.exists(sys.argv[2]): break
                time.sleep(0.01)
            db.execute("ROLLBACK")
            """, playground.path + "/.basket-sync/state.db", release]
        try holder.run()
        try await eventually("the lock is held") { FileManager.default.fileExists(atPath: release + ".held") }
        try await eventually("the agent is reported stuck", timeout: 60) { try health(playground.path)["agentState"] as? String == "stuck" }
        // The wall clock set back an hour does not make the stuck agent's heartbeat look fresh.
        #expect(try health(playground.path, clockStep: -3600)["agentState"] as? String == "stuck")
        let human = try basketSync(["-C", playground.path, "status"])
        #expect(human.stdout.contains("agent: STUCK? pid \(agent.process.processIdentifier)"), "\(human.stdout)")
        _ = FileManager.default.createFile(atPath: release, contents: nil)
        holder.waitUntilExit()
        try await eventually("running again", timeout: 60) { try health(playground.path)["agentState"] as? String == "running" }
        #expect(agent.stop() == 0)
    }

    /// The wall clock stepped forward (NTP, a VM resumed) does not make a live agent look stuck,
    /// nor its heartbeat older: its age is judged on the boot clock, which no step moves.
    @Test func aClockStepDoesNotMakeALiveAgentStuck() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("the agent's heartbeat is seen") { try health(playground.path)["heartbeatAt"] as? String != nil }
        for step in [600, 86_400, -600] {
            let stepped = try health(playground.path, clockStep: step)
            #expect(stepped["agentState"] as? String == "running", "clock stepped \(step) s: \(stepped)")
            let age = stepped["heartbeatAgeSeconds"] as? Double ?? -1
            #expect(age >= 0 && age <= 2 * 60 + 5, "clock stepped \(step) s: the heartbeat's age \(age) s")
        }
        #expect(agent.stop() == 0)
    }

    /// Every current error on its own: a rejected cart stays said when a bad event comes later;
    /// the oldest waiting event's age is given.
    @Test func everyCurrentErrorIsSaidOnItsOwn() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("cart.json", "{")
        _ = try basketSync(["-C", playground.path, "sync"])
        try playground.write("inbox/new/1.bad", "not json")
        _ = try basketSync(["-C", playground.path, "sync"])
        let errors = try health(playground.path)["errors"] as? [String: Any]
        #expect((errors?["cart"] as? String)?.contains("cart.json") == true, "the cart's error is not hidden by the bad event: \(String(describing: errors))")
        #expect(errors?["database"] is NSNull && errors?["inbox"] is NSNull, "\(String(describing: errors))")
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        let waiting = try health(playground.path)["oldestWaitingSeconds"] as? Double
        #expect(waiting != nil && waiting! >= 0, "an event waits in new/")
    }

    /// On a tree's root: the agent's health, and the carts summed up; each cart's report names
    /// the running agent.
    @Test func aTreeSaysItsAgentsHealthAndEachCartNamesIt() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/a", "push", "A=+1"]).status == 0)
        let agent = try AgentProcess(directory: playground.path, environment: ["BASKET_SYNC_HEARTBEAT_SECONDS": "1"])
        try await agent.waitUntilWatching()
        try await eventually("the tree's heartbeat is seen") { try health(playground.path)["agentState"] as? String == "running" }
        let root = try health(playground.path)
        #expect(root["cartsWithErrors"] as? Int == 0 && root["cartsWaiting"] as? Int == 0, "\(root)")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let cart = ((report?["carts"] as? [[String: Any]])?.first?["status"] as? [String: Any])
        #expect(((cart?["watch"] as? [String: Any])?["agent"] as? [String: Any])?["pid"] as? Int == Int(agent.process.processIdentifier), "\(String(describing: cart?["watch"]))")
        #expect((cart?["health"] as? [String: Any])?["agentState"] as? String == "running")
        #expect(agent.stop() == 0)
    }
}

/// The state letter of a process in /proc (R, S, T…).
enum AgentStateLetter {
    static func of(_ pid: Int32) -> Character? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].first { $0 != " " }
    }
}

extension HealthTests {
    /// A full file system is a current error of its own: the agent's passes fail on it, and the
    /// error cannot be recorded in the database it cannot write — `status`, its health and the
    /// metrics say it from the file system itself, until space is freed, with no agent running
    /// (the database read as its file holds it), and a command that must write says the disk is
    /// full (75), not a "disk I/O error". (A 2 MiB tmpfs of the test's: needs root, as CI has.)
    @Test func aFullDiskIsACurrentErrorThoughNothingCanRecordIt() throws {
        let playground = try Playground()
        let mountPoint = playground.path + "/small"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: false)
        let mounted = try basketSync(["-t", "tmpfs", "-o", "size=2m", "tmpfs", mountPoint], executable: "/usr/bin/mount")
        try #require(mounted.status == 0, "a tmpfs can be mounted here (root): \(mounted.stderr)")
        defer { _ = try? basketSync([mountPoint], executable: "/usr/bin/umount") }
        let directory = mountPoint + "/d"
        #expect(try basketSync(["-C", directory, "init"]).status == 0)
        #expect(try basketSync(["-C", directory, "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", directory, "sync"]).status == 0)
        func errors() throws -> [String: Any] { try health(directory)["errors"] as? [String: Any] ?? [:] }
        // No command reads the database before the disk fills: its WAL and WAL index are gone
        // with the last connection (a reader would leave them).
        #expect(!FileManager.default.fileExists(atPath: directory + "/.basket-sync/state.db-shm"))
        // Full to the last byte: the database's WAL index cannot even be made to read it.
        for (block, file) in [("64k", "fill"), ("1k", "fill2"), ("1", "fill3")] {
            let filled = try basketSync(["if=/dev/zero", "of=\(mountPoint)/\(file)", "bs=\(block)"], executable: "/usr/bin/dd")
            #expect(filled.status != 0, "dd stops at a full disk")
        }
        #expect(try basketSync(["-C", directory, "push", "A=+1"]).status != 0)
        let sync = try basketSync(["-C", directory, "sync"])
        #expect(sync.status == 75 && sync.stderr.contains("No space left on device; free some disk space"), "\(sync.status) \(sync.stderr)")
        let full = try errors()["database"] as? String
        #expect(full?.contains("the file system holding \(directory)/.basket-sync is full") == true, "\(String(describing: full))")
        let status = try basketSync(["-C", directory, "status"])
        #expect(status.stdout.contains("last error: now: the file system holding"), "\(status.stdout)")
        let metrics = try basketSync(["-C", directory, "metrics"])
        #expect(metrics.stdout.contains("basket_sync_errors{directory=\"\(directory)\"} 1"), "\(metrics.stdout)")
        for file in ["fill", "fill2", "fill3"] { try FileManager.default.removeItem(atPath: mountPoint + "/" + file) }
        #expect(try errors()["database"] is NSNull, "space freed: no error")
    }
}

/// Which cart errors hold, against a model written from docs/spec.md §12's words: a cart error
/// holds while the last cart read of the cart as set now was rejected — a valid cart read since
/// resolves it, and so does `"cart"` set to another file (the file rejected is no longer read); a
/// cart missing is read as none. Every report counts it alike: the human report's last error, the
/// JSON's `health.errors`, the root's `withErrors`, the metrics' `…_errors`.
extension HealthTests {
    @Test(arguments: [false, true])
    func cartErrorsHoldByOneRuleWhateverTheSettingsBecame(tree: Bool) throws {
        for round in 0..<Knobs.value("BASKET_SYNC_RUNS", default: 3) {
            let seed = Knobs.replaySeed ?? Knobs.seed &+ UInt64(round)
            var rng = SplitMix64(seed: seed)
            let playground = try Playground()
            let root = playground.path + "/d"
            #expect(try basketSync(["-C", root, "init"] + (tree ? ["--tree"] : [])).status == 0)
            let directory = tree ? root + "/c1" : root
            if tree { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false) }
            let settings = root + "/basket-sync.json"
            var keys = "products", cartPath = "cart.json"
            var files: [String: String] = [:]  // path → "products", "items" or "broken"
            var lastRead: (path: String, ok: Bool)?
            var log: [String] = []
            /// The setting `"name": "from"` in basket-sync.json made `"name": "to"`.
            func set(_ name: String, from: String, to: String) throws -> String {
                let text = try String(contentsOfFile: settings, encoding: .utf8)
                try text.replacingOccurrences(of: "\"\(name)\": \"\(from)\"", with: "\"\(name)\": \"\(to)\"").write(toFile: settings, atomically: true, encoding: .utf8)
                return to
            }
            for step in 0..<24 {
                switch rng.below(5) {
                case 0, 1:
                    let kind = rng.below(3) == 0 ? "broken" : keys
                    try FileManager.default.createDirectory(atPath: directory + "/host", withIntermediateDirectories: true)
                    let text = kind == "broken" ? "{\"\(keys)\": [" : "{\"\(keys)\": [], \"syncedThrough\": 0}"
                    try text.write(toFile: directory + "/" + cartPath, atomically: true, encoding: .utf8)
                    files[cartPath] = kind
                    log.append("\(step): \(cartPath) \(kind)")
                case 2:
                    keys = try set("products", from: keys, to: keys == "products" ? "items" : "products")
                    log.append("\(step): keys \(keys)")
                case 3:
                    cartPath = try set("cart", from: cartPath, to: cartPath == "cart.json" ? "host/cart.json" : "cart.json")
                    log.append("\(step): cart \(cartPath)")
                default:
                    unlink(directory + "/" + cartPath)
                    files[cartPath] = nil
                    log.append("\(step): \(cartPath) removed")
                }
                let sync = try basketSync(["-C", root, "sync"])
                #expect(sync.status < 128, "seed \(seed): \(sync.stderr)")
                if let kind = files[cartPath] { lastRead = (cartPath, kind == keys) }
                let expected = lastRead.map { !$0.ok && $0.path == cartPath } ?? false
                let status = try basketSync(["-C", directory, "status", "--json"])
                let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
                let errors = (report?["health"] as? [String: Any])?["errors"] as? [String: Any]
                let held = (errors ?? [:]).filter { !($0.value is NSNull) }.keys.sorted()
                let human = try basketSync(["-C", directory, "status"]).stdout
                let lastError = human.split(separator: "\n").first { $0.hasPrefix("last error:") }.map(String.init) ?? ""
                let samples = try basketSync(["-C", root, "metrics"]).stdout
                let errorCount = samples.split(separator: "\n").first { $0.hasPrefix("basket_sync_errors{") }?.split(separator: " ").last.flatMap { Double($0) }
                var listed: Bool?
                if tree {
                    let rootReport = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", root, "status", "--json"]).stdout.utf8)) as? [String: Any]
                    listed = ((rootReport?["withErrors"] as? [[String: Any]]) ?? []).contains { $0["cart"] as? String == "c1" }
                }
                let said = "seed \(seed), after \(log.joined(separator: "; ")): held \(held), last error \(lastError), metrics \(errorCount ?? -1), root \(listed.map(String.init) ?? "-")"
                #expect(held == (expected ? ["cart"] : []), "\(said)")
                #expect(lastError.contains("still current") == expected, "\(said)")
                #expect(errorCount == (expected ? 1 : 0), "\(said)")
                if let listed { #expect(listed == expected, "\(said)") }
                if held != (expected ? ["cart"] : []) { break }
            }
        }
    }
}
