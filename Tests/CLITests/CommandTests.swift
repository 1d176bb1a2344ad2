import CSQLite
import Foundation
import Testing

    /// A cart is the host's cart as the configuration reads it: one read under other keys is read
    /// again once the keys change, though its file did not (by `sync`, as by the agent's start).
    @Test func aCartIsReadAgainWhenTheKeysChange() async throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1,"qty":3}],"syncedThrough":1}"#)
        // Read well after it was written: the cart is then known as certainly that version.
        let written = try FileManager.default.attributesOfItem(atPath: playground.path + "/cart.json")[.modificationDate] as? Date ?? Date()
        try await eventually("a second passed since the cart was written") { Date().timeIntervalSince(written) > 1.2 }
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect((playground.records("notifications.jsonl").last?["products"] as? [[String: Any]])?.first?["quantity"] as? Int == 1)
        let settings = playground.read("basket-sync.json").replacingOccurrences(of: "\"quantity\": \"quantity\"", with: "\"quantity\": \"qty\"")
        #expect(settings.contains("\"quantity\": \"qty\""), "the keys setting as init writes it")
        try playground.writeAtomically("basket-sync.json", settings)
        #expect(try basketSync(["-C", playground.path, "sync"]).status == 0)
        #expect((playground.records("notifications.jsonl").last?["products"] as? [[String: Any]])?.first?["quantity"] as? Int == 3, "\(playground.read("notifications.jsonl"))")
    }

/// The one-shot commands as a user runs them: stdout, stderr and the exit code.
@Suite struct CommandTests {
    /// A value given on the command line is quoted in an error at most 80 characters long
    /// (docs/spec.md §7), whatever the option: a 5,000-character value makes no 5 KB message.
    @Test func anArgumentIsQuotedInAnErrorAtMostEightyCharactersLong() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        let long = String(repeating: "9", count: 5_000) + "x"
        for arguments in [["handle-payment", "--order", "o1", "--total", long], ["payment-started", "--order", "o1", "--total", long],
                          ["wait", "--after", long], ["wait", "--timeout", long], ["lock", "--timeout", long, "--", "true"],
                          ["push", long], ["status", "--" + long], ["set-store", "s", "--mode", long], ["watch", "--poll=" + long],
                          ["lock", "--", "/no/such/" + long]] {
            let run = try basketSync(["-C", playground.path] + arguments)
            #expect([64, 66].contains(run.status) && run.stderr.count < 600 && run.stderr.contains("…"), "\(arguments.prefix(2)): \(run.status) \(run.stderr.count) characters: \(run.stderr.prefix(300))")
        }
    }

    @Test func versionAndHelp() throws {
        let version = try basketSync(["--version"])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("basket-sync 0."))
        for command in ["init", "watch", "sync", "push", "status", "apply", "payment-started", "handle-payment", "set-store", "validate", "wait", "check-host"] {
            let help = try basketSync([command, "--help"])
            #expect(help.status == 0)
            #expect(help.stdout.contains("usage: basket-sync [-C DIR] \(command)"))
            #expect(help.stdout.contains("example:"))
        }
        #expect(try basketSync(["--help"]).stdout.contains("commands:"))
    }

    @Test(arguments: [
        (["frobnicate"], "unknown command frobnicate"),
        (["push"], "push needs products"),
        (["push", "sku-1"], "sku-1 is not a product; write SKU=QUANTITY"),
        (["push", "--state", "a=-1"], "a=-1: an absolute quantity must be 0 or more"),
        (["push", "--redirect", "--state"], "push takes one of --state, --transfer ID and --redirect"),
        (["status", "--colour"], "status: unexpected --colour"),
        (["-C"], "-C needs a directory"),
        (["watch", "--log-format", "xml"], "--log-format is human or json, not xml"),
    ])
    func usageErrorsExit64(arguments: [String], message: String) throws {
        let run = try basketSync(arguments)
        #expect(run.status == 64)
        #expect(run.stderr.contains(message), "stderr: \(run.stderr)")
    }

    @Test func commandsOutsideASyncDirectorySayWhatToDo() throws {
        let playground = try Playground()
        for arguments in [["status"], ["sync"], ["push", "a=+1"]] {
            let run = try basketSync(["-C", playground.path] + arguments)
            #expect(run.status == 66, "\(arguments): \(run.stderr)")
            #expect(run.stderr.contains("run basket-sync init there first"))
        }
    }

    @Test func initIsIdempotentAndTheDirectoryComesFromTheEnvironmentOrTheCurrentDirectory() throws {
        let playground = try Playground()
        let first = try basketSync(["init"], environment: ["BASKET_SYNC_DIR": playground.path + "/sync"])
        #expect(first.status == 0)
        #expect(first.stdout.contains("created \(playground.path)/sync/basket-sync.json"))
        let second = try basketSync(["init"], in: playground.path + "/sync")
        #expect(second.status == 0)
        #expect(second.stdout.contains("already a sync directory"))
        #expect(playground.read("sync/basket-sync.json").contains("\"pendingTimeoutSeconds\": 10"))
    }

    @Test func syncIsOnePassAndExits65OnABadCart() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        _ = try basketSync(["-C", playground.path, "push", "--id", "e1", "A=+2"])
        try playground.write("cart.json", "{\"products\": [{\"id\": \"X\", \"quantity\": 1}], \"syncedThrough\": 0}")
        let first = try basketSync(["-C", playground.path, "sync", "--json"])
        #expect(first.status == 0)
        #expect(first.stdout == "{\"cart\":\"taken\",\"inbox\":{\"taken\":1,\"duplicates\":0,\"bad\":0}}\n")
        #expect(playground.records("outbox.jsonl").count == 1)
        #expect(playground.records("notifications.jsonl").count == 1)
        // The host applies #1: the next pass settles it and notifies A.
        try playground.write("cart.json", "{\"products\": [{\"id\": \"X\", \"quantity\": 1}, {\"id\": \"A\", \"quantity\": 2}], \"syncedThrough\": 1}")
        let second = try basketSync(["-C", playground.path, "sync"])
        #expect(second.stdout == "cart taken; inbox: 0 taken, 0 duplicates, 0 bad\n")
        #expect(playground.records("notifications.jsonl").last.map(products) == ["A": 2])
        try playground.write("cart.json", "{\"products\": [{\"id\": \"A\", \"quantity\": 2}], \"syncedThrough\": 1, }")
        let bad = try basketSync(["-C", playground.path, "sync"])
        #expect(bad.status == 65)
        #expect(bad.stderr.contains("cart.json:1:64: unexpected '}'; expected a key in double quotes"))
        #expect(playground.records("notifications.jsonl").count == 2, "nothing is sent for a bad cart")
    }

    /// `apply` on a cart without `syncedThrough` says so, not that the cart said 0.
    @Test func applyOnACartWithoutSyncedThroughSaysItHadNone() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try playground.write("cart.json", #"{"products":[]}"#)
        _ = try basketSync(["-C", playground.path, "sync"])
        let applied = try basketSync(["-C", playground.path, "apply"])
        #expect(applied.status == 0 && applied.stdout.contains("the cart had no syncedThrough: now synced through 0"), "\(applied.stdout)")
    }

    @Test func statusShowsTheLinesThePendingBatchesAndTheCounters() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        _ = try basketSync(["-C", playground.path, "sync"])
        _ = try basketSync(["-C", playground.path, "push", "A=+2"])
        _ = try basketSync(["-C", playground.path, "sync"])
        let human = try basketSync(["-C", playground.path, "status"])
        #expect(human.stdout.contains("A: Mealz's share 0, WebView's basis 2 (pending +2), host cart 0"))
        #expect(human.stdout.contains("#1 {A +2}"))
        #expect(human.stdout.contains("waits for syncedThrough ≥ 1"))
        // The files' last seqs, not counts (retention drops records, an adoption starts high).
        #expect(human.stdout.contains("last seq: outbox #1, notifications #1, payments #0"), "\(human.stdout)")
        let json = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", playground.path, "status", "--json"]).stdout.utf8)) as! [String: Any]
        #expect((json["pending"] as! [[String: Any]]).map { $0["seq"] as! Int } == [1])
        #expect((json["records"] as! [String: Int])["outbox"] == 1)
        #expect(json["syncedThrough"] as? Int == 0)
    }

    /// status tells when the last cart was taken and what it produced,
    /// whether the last error still holds, and counts redelivered ids; sync says unchanged.
    @Test func statusTellsTheTruthOfNow() throws {
        let playground = try Playground()
        func run(_ arguments: [String]) throws -> Run { try basketSync(["-C", playground.path] + arguments) }
        func status() throws -> [String: Any] {
            try JSONSerialization.jsonObject(with: Data(try run(["status", "--json"]).stdout.utf8)) as! [String: Any]
        }
        _ = try run(["init"])
        try playground.write("cart.json", "{\"products\": [{\"id\": \"X\", \"quantity\": \"two\"}]}")
        #expect(try run(["sync"]).status == 65)
        var human = try run(["status"]).stdout
        #expect(human.contains("cart: none taken yet; rejected at "), "\(human)")
        #expect(human.contains("must be a whole number, not a string (still current: no valid cart read since)"), "\(human)")
        #expect((try status()["lastError"] as? [String: Any])?["current"] as? Bool == true)

        try playground.write("cart.json", "{\"products\": [{\"id\": \"X\", \"quantity\": 2}]}")
        #expect(try run(["sync", "--json"]).stdout.hasPrefix("{\"cart\":\"taken\""))
        #expect(try run(["sync", "--json"]).stdout.hasPrefix("{\"cart\":\"unchanged\""), "the same cart again changes nothing")
        try playground.write("cart.json", "{\"products\": [ {\"quantity\": 2, \"id\": \"X\"} ], \"note\": \"reformatted\"}")
        #expect(try run(["sync"]).stdout.hasPrefix("cart unchanged;"), "other bytes, the same lines: nothing new")
        human = try run(["status"]).stdout
        #expect(human.range(of: #"cart: last taken at \S+, notified #1; read again at \S+, unchanged"#, options: .regularExpression) != nil, "\(human)")
        #expect(human.range(of: #"\(resolved at \S+: a valid cart was read since\)"#, options: .regularExpression) != nil, "\(human)")
        let json = try status()
        #expect((json["lastError"] as? [String: Any])?["current"] as? Bool == false)
        #expect((json["cart"] as? [String: Any])?["produced"] as? String == "notified #1")
        #expect((json["cart"] as? [String: Any])?["read"] as? String == "unchanged")

        // A redelivered id: acknowledged, not done again, and counted.
        _ = try run(["push", "--id", "e1", "A=+1"])
        _ = try run(["sync"])
        _ = try run(["push", "--id", "e1", "A=+1"])
        #expect(try run(["sync"]).stdout.contains("inbox: 0 taken, 1 duplicates"))
        let inbox = try status()["inbox"] as! [String: Any]
        #expect(inbox["taken"] as? Int == 1)
        #expect(inbox["duplicates"] as? Int == 1)
        #expect(playground.names("inbox/cur").count == 2, "cur/ holds both deliveries: taken + duplicates")
        #expect(try run(["status"]).stdout.contains("inbox: 1 taken, 1 duplicate deliveries"))
    }

    /// `validate --cart -` reads standard input; a path under -C says it is
    /// relative to the sync directory.
    @Test func validateReadsStandardInputAndSaysWherePathsAreRelativeTo() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        let piped = try basketSync(["-c", "printf '{\"products\": [{\"id\": \"A\", \"quantity\": -1}]}' | \"$0\" -C \"$1\" validate --cart -", binary.path, playground.path], executable: "/bin/sh")
        #expect(piped.status == 65, "\(piped.stderr)")
        #expect(piped.stdout.contains("standard input:1:"), "\(piped.stdout)")
        let valid = try basketSync(["-c", "echo '[]' | \"$0\" -C \"$1\" validate -", binary.path, playground.path], executable: "/bin/sh")
        #expect(valid.status == 0, "\(valid.stderr)")
        #expect(valid.stdout == "standard input: valid\n")
        let relative = try basketSync(["-C", playground.path, "validate", playground.path.dropFirst() + "/cart.json"])
        #expect(relative.status == 66)
        #expect(relative.stderr.contains("relative to the sync directory \(playground.path) (as with git -C)"), "\(relative.stderr)")
    }

    @Test func sighupReloadsTheConfigurationAndJsonLogsAreOneObjectPerLine() async throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        let agent = try AgentProcess(directory: playground.path, arguments: ["--log-format", "json"])
        try await agent.waitUntilWatching()
        try playground.write("basket-sync.json", "{\"pendingTimeoutSeconds\": 0.2}")
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the configuration is reloaded") { agent.log.contains("reloaded basket-sync.json") }
        _ = try basketSync(["-C", playground.path, "push", "A=+1"])
        try await eventually("the new window applies") { agent.log.contains("batch #1 rolled back") }
        #expect(agent.stop() == 0)
        for line in agent.log.split(separator: "\n") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object?["level"] != nil && object?["message"] != nil, "not a JSON log line: \(line)")
        }
    }

    /// A cart rejected under the settings in force is read again when a SIGHUP brings settings
    /// it reads under (here a link, and "followSymlinks" turned on), not at its next change.
    @Test func aSighupThatChangesHowTheCartIsReadReadsItAgain() async throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try playground.write("host.json", cartJSON([("A", 1)], syncedThrough: 0))
        try FileManager.default.createSymbolicLink(atPath: playground.path + "/cart.json", withDestinationPath: playground.path + "/host.json")
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try await eventually("the link is rejected") { agent.log.contains("the cart is a symbolic link") }
        try playground.write("basket-sync.json", #"{"followSymlinks": true}"#)
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the cart is read again and notified") { playground.records("notifications.jsonl").count == 1 }
        #expect(agent.stop() == 0)
    }

    /// With "followSymlinks", a cart that is a link to a file in another folder is taken when
    /// that file changes — inotify sees the sync directory's names, not the link's target, so
    /// the agent looks at the cart every interval as well, and says so (its log, `status`): not
    /// "inotify" alone.
    @Test func aCartThatIsALinkElsewhereIsTakenWhenItsTargetChanges() async throws {
        let playground = try Playground()
        let dir = playground.path + "/sync"
        _ = try basketSync(["-C", dir, "init"])
        try playground.write("sync/basket-sync.json", #"{"followSymlinks": true}"#)
        try FileManager.default.createDirectory(atPath: playground.path + "/host", withIntermediateDirectories: false)
        try playground.write("host/cart.json", cartJSON([], syncedThrough: 0))
        try FileManager.default.createSymbolicLink(atPath: dir + "/cart.json", withDestinationPath: playground.path + "/host/cart.json")
        let agent = try AgentProcess(directory: dir)
        try await agent.waitUntilWatching()
        _ = try basketSync(["-C", dir, "push", "A=+1"])
        try await eventually("the push is taken") { playground.records("sync/outbox.jsonl").count == 1 }
        try playground.writeAtomically("host/cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        try await eventually("the target's new version is taken") {
            playground.records("sync/notifications.jsonl").last?["syncedThrough"] as? Int == 1
        }
        let said = "the cart also looked at every 1000 ms (\"followSymlinks\": a link may lead to a file inotify does not see here)"
        #expect(agent.log.contains(said), "\(agent.log)")
        let status = try basketSync(["-C", dir, "status"])
        #expect(status.stdout.contains(said), "\(status.stdout)")
        #expect(agent.stop() == 0)
    }

    /// A sync directory's failed `sync` pass is kept for `status`, as a tree cart's and the
    /// agent's are: a cron job failing at every pass does not look healthy.
    @Test func aFailedSyncPassIsKeptForStatus() throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        try playground.write("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        #expect(mkfifo(playground.url("notifications.jsonl").path, 0o600) == 0)
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status != 0, "\(sync.stdout)")
        let status = try basketSync(["-C", playground.path, "status", "--json"])
        let report = try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any]
        let lastError = report?["lastError"] as? [String: Any]
        #expect((lastError?["message"] as? String)?.contains("notifications.jsonl") == true, "\(status.stdout)")
    }

    /// A delivery is not stopped by a configuration the commands refuse — broken, emptied as an
    /// editor rewrites it, or writable by others — into a sync directory or a tree's cart that is
    /// made, and `status` says so.
    @Test func aDeliveryIsNotStoppedByARefusedConfiguration() throws {
        let playground = try Playground()
        let single = playground.path + "/single"
        #expect(try basketSync(["-C", single, "init"]).status == 0)
        let settings = playground.read("single/basket-sync.json")
        for (what, mend) in [("broken", { try playground.write("single/basket-sync.json", settings + "}") }),
                             ("writable by others", { try playground.write("single/basket-sync.json", settings); chmod(single + "/basket-sync.json", 0o666) })] {
            try mend()
            #expect(try basketSync(["-C", single, "sync"]).status == 78, "\(what): the commands refuse it")
            let push = try basketSync(["-C", single, "push", "A=+1"])
            #expect(push.status == 0 && playground.names("single/inbox/new").count == 1, "\(what): \(push.stderr)")
            let status = try basketSync(["-C", single, "status"])
            #expect(status.status == 78 && status.stdout.contains("every other command but push refuses"), "\(what): \(status.stdout)")
            try FileManager.default.removeItem(atPath: single + "/inbox/new/" + playground.names("single/inbox/new")[0])
        }
        // In a tree: a cart that is made (its folder, marker and inbox) is delivered into all
        // the same; a cart is made only under a configuration the commands take (78, nothing made).
        let root = playground.path + "/tree"
        #expect(try basketSync(["-C", root, "init", "--tree"]).status == 0)
        try FileManager.default.createDirectory(atPath: root + "/c1", withIntermediateDirectories: false)
        #expect(try basketSync(["-C", root, "sync"]).status == 0)
        let treeSettings = playground.read("tree/basket-sync.json")
        for (what, mend) in [("broken", { try playground.write("tree/basket-sync.json", treeSettings + "}") }),
                             ("emptied", { try playground.write("tree/basket-sync.json", "") }),
                             ("writable by others", { try playground.write("tree/basket-sync.json", treeSettings); chmod(root + "/basket-sync.json", 0o666) })] {
            try mend()
            #expect(try basketSync(["-C", root + "/c1", "sync"]).status == 78, "\(what): the commands refuse it")
            let push = try basketSync(["-C", root + "/c1", "push", "--id", "m-\(what)", "A=+1"])
            #expect(push.status == 0 && playground.names("tree/c1/inbox/new").count == 1, "\(what): \(push.status) \(push.stderr)")
            try FileManager.default.removeItem(atPath: root + "/c1/inbox/new/" + playground.names("tree/c1/inbox/new")[0])
            let refused = try basketSync(["-C", root + "/c2", "push", "A=+1"])
            #expect(refused.status == 78 && refused.stderr.contains(root + "/basket-sync.json") && !FileManager.default.fileExists(atPath: root + "/c2"), "\(what): \(refused.status) \(refused.stderr)")
        }
    }

    /// A command finding the database of an older layout while another process holds the agent
    /// lock (an agent of an older version: one of this version brings the layout up at its
    /// start) refuses (75) and changes nothing; once the lock is free, it converts and runs.
    @Test func anOlderAgentsDatabaseIsNotConvertedUnderIt() throws {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        #expect(try basketSync(["-C", playground.path, "push", "A=+1"]).status == 0)
        var handle: OpaquePointer?
        #expect(sqlite3_open(playground.path + "/.basket-sync/state.db", &handle) == SQLITE_OK)
        #expect(sqlite3_exec(handle, "PRAGMA user_version = 4", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)
        let lock = open(playground.path + "/.basket-sync/agent.lock", O_RDWR | O_CREAT, 0o600)
        #expect(lock >= 0 && flock(lock, LOCK_EX) == 0)
        let refused = try basketSync(["-C", playground.path, "set-store", "shop-1", "--mode", "retailer"])
        #expect(refused.status == 75 && refused.stderr.contains("an agent of an older basket-sync serves it"), "\(refused.status) \(refused.stderr)")
        #expect(playground.databaseRows("PRAGMA user_version").first == ["4"], "nothing converted")
        #expect(try basketSync(["-C", playground.path, "status"]).status == 0, "a reader reads it as it is")
        close(lock)
        #expect(try basketSync(["-C", playground.path, "set-store", "shop-1", "--mode", "retailer"]).status == 0)
        #expect(playground.databaseRows("PRAGMA user_version").first == ["5"])
    }

    /// What a directory is cannot change under a running agent, either way: a sync directory's
    /// agent refuses a configuration that now says "layout": "tree" and keeps its settings. The
    /// refusal names the setting's place, as a one-shot command's does.
    @Test func aSyncDirectorysAgentRefusesToBecomeATreeOnSighup() async throws {
        let playground = try Playground()
        _ = try basketSync(["-C", playground.path, "init"])
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        try playground.write("basket-sync.json", "{\n  \"layout\": \"tree\"\n}")
        kill(agent.process.processIdentifier, SIGHUP)
        try await eventually("the reload is refused") { agent.log.contains("a sync directory cannot become a tree under a running agent") }
        try await eventually("the settings in force are kept") { agent.log.contains("the settings in force are kept") }
        #expect(agent.log.contains("basket-sync.json:2:13: \"layout\" is now \"tree\""), "\(agent.log)")
        #expect(!agent.log.contains("reloaded basket-sync.json"), "\(agent.log)")
        #expect(agent.stop() == 0)
        let status = try basketSync(["-C", playground.path, "status"])
        #expect(status.status == 78 && status.stderr.contains("basket-sync.json:2:13: \"layout\" says \"tree\""), "\(status)")
    }
}
