import Foundation
import Testing

/// Every sample, run end to end as its README says, with its result checked.
@Suite struct SampleTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs a sample with the built binaries first on the PATH.
    func sample(_ executable: String, _ arguments: [String] = []) throws -> Run {
        let path = binary.deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        return try basketSync(arguments, environment: ["PATH": path], executable: executable)
    }

    func path(_ relative: String) -> String { Self.root.appendingPathComponent(relative).path }

    @Test func shellHost() throws {
        let playground = try Playground()
        let run = try sample(path("Samples/shell-host/demo.sh"), [playground.path])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("cart before checkout: [{\"id\":\"bread\",\"quantity\":1},{\"id\":\"pasta\",\"quantity\":2},{\"id\":\"tomato\",\"quantity\":2},{\"id\":\"basil\",\"quantity\":1}]"))
        #expect(run.stdout.contains("cart after checkout: []"))
        let payments = playground.records("payments.jsonl")
        #expect(payments.map { $0["type"] as! String } == ["paymentStarted", "handlePayment"])
        #expect(payments.allSatisfy { $0["orderId"] as? String == "order-7" && $0["status"] as? String == "recorded" })
        let mealz = (payments.last?["mealzProducts"] as? [[String: Any]])?.map { "\($0["id"]!)=\($0["quantity"]!)" }
        #expect(mealz == ["pasta=2", "tomato=2", "basil=1"], "the shopper's bread is not Mealz's")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect(cart["syncedThrough"] as? Int == 2)
    }

    /// The shell host back after a long while: 1,200 records wait (past what one argument can
    /// carry), with rotation at 300 bytes keeping 1 (most of them in no file any more). It applies
    /// every one, keeps the shopper's line, and announces the redirect.
    @Test func shellHostAfterALongAbsence() throws {
        let playground = try Playground()
        let host = path("Samples/shell-host/host.sh")
        let environment = ["BASKET_SYNC_DIR": playground.path]
        func runHost(_ arguments: [String]) throws -> Run {
            let searchPath = binary.deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
            return try basketSync(arguments, environment: environment.merging(["PATH": searchPath]) { $1 }, executable: host)
        }
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("basket-sync.json", "{\"rotate\": {\"maxBytes\": 300, \"keep\": 1}}")
        #expect(try runHost(["add", "bread", "2"]).status == 0)
        for index in 0..<1_200 {
            let name = "e\(index)"
            try playground.write("inbox/tmp/\(name)", "{\"id\":\"\(name)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(index % 7)\",\"quantity\":1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "--redirect"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let synced = try runHost(["sync"])
        #expect(synced.status == 0, "\(synced.stderr)")
        #expect(synced.stdout.contains("redirectToCart (seq 1201)"), "\(synced.stdout)")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any]
        let lines = (cart?["products"] as? [[String: Any]]) ?? []
        let quantities = Dictionary(uniqueKeysWithValues: lines.map { ($0["id"] as! String, $0["quantity"] as! Int) })
        #expect(quantities["bread"] == 2, "the shopper's line stays: \(quantities)")
        #expect((0..<7).map { quantities["S\($0)"] ?? 0 }.reduce(0, +) == 1_200, "every record applied once: \(quantities)")
        #expect(cart?["syncedThrough"] as? Int == 1_201)
    }

    /// The fixed-format Python host: its own keys, its labels, driven by `wait` — once (cron) and
    /// as a loop beside the agent.
    @Test func legacyFormatHost() async throws {
        let playground = try Playground()
        let directory = playground.path + "/shop"
        try FileManager.default.copyItem(atPath: path("Samples/legacy-format"), toPath: directory)
        #expect(try basketSync(["-C", directory, "init"]).status == 0)
        #expect(playground.read("shop/basket-sync.json").contains("\"syncedThrough\": \"progress\""), "init keeps the host's settings")
        #expect(try basketSync(["-C", directory, "push", "pasta-500=+2", "tomato-can=+1", "bread-1=-1", "olive-oil=+1"]).status == 0)
        #expect(try basketSync(["-C", directory, "push", "--redirect"]).status == 0)
        #expect(try basketSync(["-C", directory, "sync"]).status == 0)
        // Run as its README runs it: ./host.py (it is executable).
        let host = [path("Samples/legacy-format/host.py"), "--basket-sync", binary.path]
        let once = try basketSync(Array(host.dropFirst()) + ["--once", directory], executable: host[0])
        #expect(once.status == 0, "\(once.stdout)\n\(once.stderr)")
        #expect(once.stdout == "#1: applied 4 line(s)\n#2: the shopper asked to open the cart\n")
        var cart = try JSONSerialization.jsonObject(with: Data(playground.read("shop/cart.json").utf8)) as! [String: Any]
        #expect(cart["cartId"] as? String == "c-1001", "the host's own fields are kept")
        #expect(cart["progress"] as? Int == 2)
        #expect((cart["items"] as! [[String: Any]]).map { "\($0["sku"]!)=\($0["qty"]!) \($0["label"]!)" }
                == ["pasta-500=2 Penne rigate 500 g", "tomato-can=1 Crushed tomatoes 400 g", "olive-oil=1 olive-oil"],
                "bread went to 0 and left; new lines are labelled from the catalogue, or by their SKU")
        #expect(try basketSync(["-C", directory, "sync"]).status == 0)
        #expect(playground.records("shop/notifications.jsonl").last.map(products) == ["pasta-500": 2, "tomato-can": 1, "olive-oil": 1])
        #expect(playground.records("shop/notifications.jsonl").last?["syncedThrough"] as? Int == 2)

        // As a service: the host loops on wait beside the agent.
        let agent = try AgentProcess(directory: directory)
        try await agent.waitUntilWatching()
        let loop = Child()
        loop.executableURL = URL(fileURLWithPath: host[0])
        loop.arguments = Array(host.dropFirst()) + [directory]
        loop.standardOutput = FileHandle.nullDevice
        loop.standardError = FileHandle.nullDevice
        loop.standardInput = FileHandle.nullDevice
        try loop.run()
        defer { killTree(loop.processIdentifier); loop.waitUntilExit() }
        #expect(try basketSync(["-C", directory, "push", "basil-pot=+1", "pasta-500=-1"]).status == 0)
        try await eventually("the host applied record 3 and the agent notified it") {
            playground.records("shop/notifications.jsonl").last?["syncedThrough"] as? Int == 3
        }
        cart = try JSONSerialization.jsonObject(with: Data(playground.read("shop/cart.json").utf8)) as! [String: Any]
        #expect((cart["items"] as! [[String: Any]]).map { "\($0["sku"]!)=\($0["qty"]!)" } == ["pasta-500=1", "tomato-can=1", "olive-oil=1", "basil-pot=1"])
        #expect(playground.records("shop/notifications.jsonl").last.map(products) == ["pasta-500": 1, "tomato-can": 1, "olive-oil": 1, "basil-pot": 1])
        #expect(agent.stop() == 0)
    }

    @Test func cron() throws {
        let playground = try Playground()
        let directory = playground.path + "/shop"
        let wrapper = path("Samples/cron/basket-sync-cron")
        let first = try sample(wrapper, [directory])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(playground.read("shop/basket-sync.json").contains("\"pendingTimeoutSeconds\": 180"))
        #expect(try basketSync(["-C", directory, "push", "--id", "e1", "A=+1"]).status == 0)
        try playground.write("shop/cart.json", cartJSON([("X", 1)]))
        let second = try sample(wrapper, [directory])
        #expect(second.status == 0)
        #expect(second.stdout.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \{"cart":"taken","inbox":\{"taken":1,"duplicates":0,"bad":0\}\}\n$"#, options: .regularExpression) != nil, "log line: \(second.stdout)")
        #expect(playground.records("shop/outbox.jsonl").count == 1)
        let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", directory, "status", "--json"]).stdout.utf8)) as! [String: Any]
        let deadline = (status["pending"] as! [[String: Any]]).first?["deadline"] as? String
        #expect(deadline != nil, "a host without syncedThrough gets the 180 s window")
        try playground.write("shop/cart.json", "{\"products\": 3}")
        let bad = try sample(wrapper, [directory])
        #expect(bad.status == 65)
        #expect(bad.stderr.contains("cart.json:1:14: \"products\" must be an array of lines, not a number"))
        // A pass still running (its lock held): this one is skipped, logged, and says "try again later".
        let lock = open(directory + "/.basket-sync/cron.lock", O_RDWR | O_CREAT, 0o600)
        #expect(lock >= 0 && flock(lock, LOCK_EX) == 0)
        let skipped = try sample(wrapper, [directory])
        close(lock)
        #expect(skipped.status == 75, "\(skipped.status) \(skipped.stderr)")
        #expect(skipped.stdout.hasSuffix(#" {"skipped":"a pass is still running"}"# + "\n"), "log line: \(skipped.stdout)")
    }

    @Test func systemd() async throws {
        let unit = try String(contentsOfFile: path("Samples/systemd/basket-sync@.service"), encoding: .utf8)
        func value(_ key: String) -> String? {
            unit.split(separator: "\n").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        #expect(value("Restart") == "on-failure")
        // The folder operations.md gives for "metrics" is writable under its ProtectSystem=strict.
        #expect(value("ProtectSystem") == "strict" && unit.contains("\nReadWritePaths=-/var/lib/prometheus/node-exporter\n"))
        // Not the sync directory, which others write (the Swift runtime would look for its crash
        // helper there); the instance directory is made by init.
        #expect(value("WorkingDirectory") == "/")
        #expect(value("Environment") == "SWIFT_BACKTRACE=enable=no")
        #expect(value("ReadWritePaths") == "/srv/basket-sync")
        #expect(value("KillSignal") == "SIGTERM")
        let playground = try Playground()
        let directory = playground.path + "/shop1"
        // The unit's own command lines, with the built binary in place of /usr/bin/basket-sync and
        // the playground in place of /srv/basket-sync; run from / as systemd runs them.
        func command(_ key: String) throws -> [String] {
            let line = try #require(value(key))
            return line.split(separator: " ").map {
                $0 == "/usr/bin/basket-sync" ? binary.path : $0 == "/srv/basket-sync/%i" ? directory : String($0)
            }
        }
        let pre = try command("ExecStartPre")
        #expect(try basketSync(Array(pre.dropFirst()), in: "/").status == 0)
        #expect(FileManager.default.fileExists(atPath: directory + "/.basket-sync/state.db"), "init made the instance's directory")
        let start = try command("ExecStart")
        #expect(Array(start.prefix(4)) == [binary.path, "-C", directory, "watch"])
        let agent = try AgentProcess(directory: directory, arguments: Array(start.dropFirst(4)))
        try await agent.waitUntilWatching()
        #expect(agent.log.contains("\"level\":\"info\""), "the unit logs JSON for journalctl | jq")
        #expect(agent.stop(SIGTERM) == 0)
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            let verify = try sample("/usr/bin/systemd-analyze", ["verify", path("Samples/systemd/basket-sync@.service")])
            #expect(!verify.stderr.contains("Unknown key"), "\(verify.stderr)")
        }
    }

    /// The .path unit starts the host's apply when the outbox grows; the service drains it.
    @Test func systemdPathUnitAppliesTheOutbox() throws {
        let pathUnit = try String(contentsOfFile: path("Samples/systemd/basket-sync-host@.path"), encoding: .utf8)
        #expect(pathUnit.contains("\nPathModified=/srv/basket-sync/%i/outbox.jsonl\n"))
        #expect(pathUnit.contains("\nUnit=basket-sync-host@%i.service\n"))
        let service = try String(contentsOfFile: path("Samples/systemd/basket-sync-host@.service"), encoding: .utf8)
        let start = try #require(service.split(separator: "\n").first { $0.hasPrefix("ExecStart=") }).dropFirst("ExecStart=".count)
        #expect(start.hasPrefix("/bin/sh -c '") && start.hasSuffix("'"))
        // As systemd reads it: "$$" is a "$" for the shell.
        let script = String(start.dropFirst("/bin/sh -c '".count).dropLast())
            .replacingOccurrences(of: "$$", with: "$").replacingOccurrences(of: "/usr/bin/basket-sync", with: binary.path)
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        for delta in ["A=+1", "B=+2"] { #expect(try basketSync(["-C", playground.path, "push", delta]).status == 0) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let applied = try basketSync(["-c", script], in: playground.path, executable: "/bin/sh")
        #expect(applied.status == 0, "\(applied.stderr)")
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        #expect(cart["syncedThrough"] as? Int == 2)
        let idle = try basketSync(["-c", script], in: playground.path, executable: "/bin/sh")
        #expect(idle.status == 0, "nothing to apply is not a failure")
        #expect(idle.stderr.isEmpty, "nothing to apply says nothing in the journal: \(idle.stderr)")
        // A failure of wait (here a broken configuration) fails the unit, with its message.
        try playground.write("basket-sync.json", "{\"bogus\": 1}")
        let broken = try basketSync(["-c", script], in: playground.path, executable: "/bin/sh")
        #expect(broken.status == 78, "\(broken.stderr)")
        #expect(broken.stderr.contains("basket-sync.json:1:11: unknown setting \"bogus\""), "\(broken.stderr)")
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            for unit in ["basket-sync-host@.path", "basket-sync-host@.service"] {
                let verify = try sample("/usr/bin/systemd-analyze", ["verify", path("Samples/systemd/" + unit)])
                #expect(!verify.stderr.contains("Unknown key"), "\(verify.stderr)")
            }
        }
    }

    /// Samples/tree/tree-pass: a cron pass over a tree serves every cart whose outbox changed,
    /// leaves the others alone, and a bad cart does not stop the rest.
    @Test func treePass() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path + "/c2", "push", "B=+2"]).status == 0)
        try FileManager.default.createDirectory(atPath: playground.path + "/c3", withIntermediateDirectories: true)
        try playground.write("c3/cart.json", cartJSON([("X", 1)]))
        let untouched = playground.read("c3/cart.json")
        let pass = path("Samples/tree/tree-pass")
        let first = try sample(pass, [playground.path])
        #expect(first.status == 0, "\(first.stderr)")
        for (id, line) in [("c1", "A"), ("c2", "B")] {
            let cart = try JSONSerialization.jsonObject(with: Data(playground.read("\(id)/cart.json").utf8)) as? [String: Any]
            #expect(cart?["syncedThrough"] as? Int == 1, "\(id): \(playground.read("\(id)/cart.json"))")
            #expect(((cart?["products"] as? [[String: Any]])?.first?["id"] as? String) == line)
        }
        #expect(playground.read("c3/cart.json") == untouched, "a cart whose outbox did not change is not rewritten")
        // The next pass notifies the applied carts; a garbled cart fails the pass (65), not the others.
        #expect(try basketSync(["-C", playground.path + "/c1", "push", "A=+1"]).status == 0)
        try playground.write("c3/cart.json", "{")
        let second = try sample(pass, [playground.path])
        #expect(second.status == 65, "\(second.stderr)")
        #expect(playground.records("c2/notifications.jsonl").last.map(products) == ["B": 2])
        let c1 = try JSONSerialization.jsonObject(with: Data(playground.read("c1/cart.json").utf8)) as? [String: Any]
        #expect(c1?["syncedThrough"] as? Int == 2, "c1 served in the same pass as the bad c3")
    }

    /// Samples/tree/tree-host: one waiting process serves a tree of a thousand carts — the carts
    /// that get records are applied, the others left alone.
    @Test func treeHostServesAThousandCarts() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init", "--tree"]).status == 0)
        let ids = (0..<1000).map { String(format: "c%04d", $0) }
        for id in ids {
            try FileManager.default.createDirectory(atPath: playground.path + "/" + id, withIntermediateDirectories: false)
            try playground.write("\(id)/cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        let host = Child()
        host.executableURL = URL(fileURLWithPath: path("Samples/tree/tree-host"))
        host.arguments = [playground.path]
        host.environment = ProcessInfo.processInfo.environment.merging(["BASKET_SYNC": binary.path]) { $1 }
        host.standardOutput = FileHandle.nullDevice
        try playground.write("host.err", "")
        host.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: playground.path + "/host.err"))
        try host.run()
        // Killed at the end: its wait ends with it (it looks every second).
        defer { kill(host.processIdentifier, SIGKILL) }
        let served = stride(from: 7, to: 1000, by: 50).map { ids[$0] }
        for id in served { #expect(try basketSync(["-C", playground.path + "/" + id, "push", "A=+2"]).status == 0) }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        try await eventually("every cart with a record is applied (host: \(playground.read("host.err")))") {
            served.allSatisfy { playground.read("\($0)/cart.json").contains("\"syncedThrough\": 1") }
        }
        #expect(ids.filter { !served.contains($0) }.allSatisfy { playground.read("\($0)/cart.json") == cartJSON([("X", 1)], syncedThrough: 0) },
                "the others are left alone")
        let waits = try basketSync(["-f", "wait", "-C", playground.path], executable: "/usr/bin/pgrep")
        #expect(waits.stdout.split(separator: "\n").count <= 1, "one wait for the tree: \(waits.stdout)")
        // A SIGTERM to the host alone (not its process group) ends it while it waits, and its wait with it.
        kill(host.processIdentifier, SIGTERM)
        try await eventually("the host ends on SIGTERM") { !host.isRunning }
        #expect(host.terminationStatus == 143)
        try await eventually("its wait ends with it") {
            ((try? basketSync(["-f", "\(playground.path) wait"], executable: "/usr/bin/pgrep"))?.stdout ?? "x").isEmpty
        }
    }

    /// Samples/tree/basket-sync-tree.service: its commands start the tree's agent.
    @Test func systemdTree() async throws {
        let unit = try String(contentsOfFile: path("Samples/tree/basket-sync-tree.service"), encoding: .utf8)
        func command(_ key: String) throws -> [String] {
            let line = try #require(unit.split(separator: "\n").first { $0.hasPrefix(key + "=") }).dropFirst(key.count + 1)
            return line.split(separator: " ").map { $0 == "/usr/bin/basket-sync" ? binary.path : String($0) }
        }
        let playground = try Playground()
        let root = playground.path + "/tree"
        #expect(unit.contains("\nWorkingDirectory=/\n") && unit.contains("\nRestartPreventExitStatus=64 78\n"))
        // The folder operations.md gives for "metrics" is writable under its ProtectSystem=strict.
        #expect(unit.contains("\nProtectSystem=strict\n") && unit.contains("\nReadWritePaths=-/var/lib/prometheus/node-exporter\n"))
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        func here(_ arguments: [String]) -> [String] { arguments.map { $0 == "/srv/basket-sync-tree" ? root : $0 } }
        #expect(try basketSync(here(Array(try command("ExecStartPre").dropFirst())), in: "/").status == 0)
        #expect(playground.read("tree/basket-sync.json").contains("\"layout\": \"tree\""))
        let start = here(try command("ExecStart"))
        #expect(Array(start.prefix(4)) == [binary.path, "-C", root, "watch"])
        let agent = try AgentProcess(directory: root, arguments: Array(start.dropFirst(4)))
        try await agent.waitUntilWatching()
        #expect(try basketSync(["-C", root + "/c-1", "push", "A=+1"]).status == 0)
        try await eventually("the agent serves a new cart") { playground.records("tree/c-1/outbox.jsonl").count == 1 }
        #expect(agent.stop(SIGTERM) == 0)
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            let verify = try sample("/usr/bin/systemd-analyze", ["verify", path("Samples/tree/basket-sync-tree.service")])
            #expect(!verify.stderr.contains("Unknown key"), "\(verify.stderr)")
        }
    }

    /// The logrotate sample's options, run for real between records: every record in one file.
    @Test func logrotate() throws {
        let sample = try String(contentsOfFile: path("Samples/logrotate/basket-sync"), encoding: .utf8)
        let options = sample.split(separator: "\n").drop { !$0.hasSuffix("{") }.dropFirst().prefix { $0 != "}" }
            .filter { !$0.contains(" su ") && !$0.hasPrefix("    su ") }
        #expect(options.contains("    nocreate") && !options.contains { $0.contains("copytruncate") })
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let config = playground.root.deletingLastPathComponent().appendingPathComponent("logrotate-\(UUID().uuidString).conf").path
        let state = config + ".state"
        defer { try? FileManager.default.removeItem(atPath: config); try? FileManager.default.removeItem(atPath: state) }
        try Data(("\(playground.path)/outbox.jsonl {\n" + options.map { $0 + "\n" }.joined() + "}\n").utf8).write(to: URL(fileURLWithPath: config))
        func seqs(_ name: String) -> [Int] {
            playground.read(name).split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["seq"] as? Int }
        }
        for round in 0..<3 {
            for index in 0..<2 {
                #expect(try basketSync(["-C", playground.path, "push", "--id", "r\(round)-\(index)", "A=+1"]).status == 0)
                #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
            }
            let rotate = try Child.run(URL(fileURLWithPath: "/usr/sbin/logrotate"), arguments: ["-f", "-s", state, config])
            rotate.waitUntilExit()
            #expect(rotate.terminationStatus == 0)
        }
        #expect(try basketSync(["-C", playground.path, "push", "--id", "last", "A=+1"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        // .1 uncompressed (delaycompress), older ones compressed: count what can be read plainly.
        let plain = seqs("outbox.jsonl.1") + seqs("outbox.jsonl")
        #expect(plain == [5, 6, 7], "the last rotated file and the new one: \(plain)")
        #expect(FileManager.default.fileExists(atPath: playground.path + "/outbox.jsonl.2.gz"), "older files compressed")
    }

    /// logrotate with the sample's options, in `create` and in `nocreate` mode, rotating the outbox
    /// every 0.25 s while the agent makes 1,000 records and `tail -F` follows it: every record is
    /// in exactly one of the files, and the reader sees each once, in order — including a record
    /// the agent appended between logrotate's rename and its create.
    @Test(arguments: ["create", "nocreate"])
    func logrotateUnderTheAgentLosesAndDoublesNothing(mode: String) async throws {
        let sample = try String(contentsOfFile: path("Samples/logrotate/basket-sync"), encoding: .utf8)
        // The sample's options, rotating at any size and keeping every file (uncompressed, to be
        // read here; compression happens after the rotation and changes nothing of it).
        let options = sample.split(separator: "\n").drop { !$0.hasSuffix("{") }.dropFirst().prefix { $0 != "}" }
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.hasPrefix("su ") && !$0.hasPrefix("size ") && !$0.hasPrefix("rotate ") && !$0.contains("compress") && !$0.hasSuffix("create") }
            + ["size 1", "rotate 400", mode]
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let config = playground.path + "/../logrotate-\(UUID().uuidString).conf", state = config + ".state"
        defer { try? FileManager.default.removeItem(atPath: config); try? FileManager.default.removeItem(atPath: state) }
        try Data(("\(playground.path)/outbox.jsonl {\n" + options.map { "    \($0)\n" }.joined() + "}\n").utf8).write(to: URL(fileURLWithPath: config))

        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let reader = Child()
        reader.executableURL = URL(fileURLWithPath: "/usr/bin/tail")
        reader.arguments = ["-F", "-n", "+1", playground.path + "/outbox.jsonl"]
        let read = playground.path + "/../tail-\(UUID().uuidString).out"
        defer { try? FileManager.default.removeItem(atPath: read) }
        _ = FileManager.default.createFile(atPath: read, contents: nil)
        reader.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: read))
        reader.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: "/dev/null"))
        try reader.run()
        defer { if reader.isRunning { kill(reader.processIdentifier, SIGKILL); reader.waitUntilExit() } }
        func readerSeqs() -> [Int] {
            ((try? String(contentsOfFile: read, encoding: .utf8)) ?? "").split(separator: "\n")
                .compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["seq"] as? Int }
        }

        // logrotate every 0.25 s, on a thread of its own, until told to stop.
        let rotations = Rotations(config: config, state: state)
        rotations.start()
        func deliver(_ index: Int) throws {
            let name = "\(1_764_633_600 + index / 1000).M\(String(format: "%06d", index % 1000 * 1000))P1Q\(index).logrotate"
            try playground.write("inbox/tmp/\(name)", "{\"id\":\"e\(index)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"S\(index % 7)\",\"quantity\":1}]}\n")
            #expect(rename(playground.path + "/inbox/tmp/\(name)", playground.path + "/inbox/new/\(name)") == 0)
        }
        for index in 1...1000 {
            try deliver(index)
            if index % 5 == 0 { try await Task.sleep(nanoseconds: 50_000_000) }
        }
        func inFiles() -> [Int] {
            let parts = playground.names("").filter { $0.hasPrefix("outbox.jsonl.") && Int($0.dropFirst("outbox.jsonl.".count)) != nil }
            return (parts + ["outbox.jsonl"]).flatMap { playground.records($0).compactMap { $0["seq"] as? Int } }
        }
        try await eventually("the agent made the 1,000 records", timeout: 300) { Set(inFiles()).count >= 1000 || !agent.process.isRunning }
        let rotated = rotations.stop()
        // One more record: a record written again by the agent would come before it.
        try deliver(1001)
        try await eventually("the agent made the last record", timeout: 120) { inFiles().contains(1001) || !agent.process.isRunning }
        // The reader is given time to catch up; what it missed is said below.
        try? await eventually("the reader sees the last record", timeout: 60) { readerSeqs().last == 1001 }
        #expect(agent.stop() == 0, "\(agent.log)")
        kill(reader.processIdentifier, SIGTERM)
        reader.waitUntilExit()

        #expect(rotated.failures.isEmpty, "logrotate failed: \(rotated.failures.prefix(3))")
        let parts = playground.names("").filter { $0.hasPrefix("outbox.jsonl.") && Int($0.dropFirst("outbox.jsonl.".count)) != nil }
        #expect(parts.count >= 2 && rotated.runs >= 2, "the outbox was rotated while the records came: \(parts.count) files, \(rotated.runs) runs")
        let inFiles = inFiles()
        #expect(inFiles.sorted() == Array(1...1001), "every record in exactly one file (\(mode)): \(inFiles.count) lines, missing \(Set(1...1001).subtracting(inFiles).sorted().prefix(5)), twice \(Dictionary(grouping: inFiles) { $0 }.filter { $0.value.count > 1 }.keys.sorted().prefix(5))")
        // The reader following the name sees each record at most once, in order. A record
        // appended in the instant the rotator renames the file lands in the moved part after the
        // reader left it (any appending writer has that race with a rename): it may miss those,
        // and only those — the last records of a rotated part.
        let seen = readerSeqs()
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 < $1 }, "tail -F sees each record once, in order (\(mode)): first out of place \(zip(seen, seen.dropFirst()).first { $0 >= $1 }.map { "\($0.1) after \($0.0)" } ?? "none")")
        let missed = Set(1...1001).subtracting(seen)
        let tails = parts.flatMap { part -> [Int] in
            let records = playground.records(part).compactMap { $0["seq"] as? Int }
            return Array(records.reversed().prefix { missed.contains($0) })
        }
        #expect(missed == Set(tails), "tail -F missed only records appended as the file was renamed, the last of a rotated part (\(mode)): missed \(missed.sorted().prefix(5)), of which not at a part's end \(missed.subtracting(tails).sorted().prefix(5))")
        // How many land in the moved part is not bounded by the rotations: one append may carry
        // several records (a wake-up's batch), and a loaded machine widens the window.
        #expect(seen.last == 1001, "the reader saw the last record (\(missed.count) missed over \(rotated.runs) rotations)")
    }

    @Test func sandbox() throws {
        let playground = try Playground()
        let run = try sample(path("Samples/sandbox/sandbox.sh"), [playground.path + "/sandbox"])
        #expect(run.status == 0, "\(run.stdout)\n\(run.stderr)")
        #expect(run.stdout.contains("converged: both sides hold the same Mealz lines, nothing pending"))
        #expect(run.stdout.contains("host cart, Mealz lines: [{\"id\":\"basil\",\"quantity\":1},{\"id\":\"pasta\",\"quantity\":1}]"))
        #expect(run.stdout.contains("counters: 3 updateBasket"))
    }

    @Test func swiftHost() throws {
        let run = try sample(buildDirectory.appendingPathComponent("swift-host-sample").path)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("host cart:    bread=1 pasta=2 tomato=2\nMealz's view: pasta=2 tomato=2\nconverged\n"))
        #expect(run.stdout.contains("paid: order-7; the next cart starts Mealz basket 2"))
    }
}

/// `logrotate -f` run again and again, 0.25 s apart, on a thread of its own (a blocking wait for
/// each run must not hold a test task's thread), until stopped.
final class Rotations: @unchecked Sendable {
    let config: String, state: String
    private let lock = NSLock()
    private var stopping = false
    private var done = DispatchSemaphore(value: 0)
    private(set) var runs = 0
    private(set) var failures: [String] = []

    init(config: String, state: String) { self.config = config; self.state = state }

    func start() {
        Thread.detachNewThread { [self] in
            while !lock.withLock({ stopping }) {
                if let rotate = try? Child.run(URL(fileURLWithPath: "/usr/sbin/logrotate"), arguments: ["-f", "-s", state, config]) {
                    rotate.waitUntilExit()
                    lock.withLock {
                        runs += 1
                        if rotate.terminationStatus != 0 { failures.append("exit \(rotate.terminationStatus)") }
                    }
                } else {
                    lock.withLock { failures.append("could not start logrotate") }
                }
                usleep(250_000)
            }
            done.signal()
        }
    }

    /// Stops after the run under way; how many ran and what failed.
    func stop() -> (runs: Int, failures: [String]) {
        lock.withLock { stopping = true }
        done.wait()
        return lock.withLock { (runs, failures) }
    }
}
