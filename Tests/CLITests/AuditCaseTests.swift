import CSQLite
import Foundation
import Testing

/// The ways to double or lose units, end to end with the binary, and the agent's own order.
@Suite struct AuditCaseTests {
    func syncDirectory(_ configuration: String? = nil) throws -> Playground {
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)
        if let configuration { try playground.write("basket-sync.json", configuration) }
        return playground
    }

    func run(_ playground: Playground, _ arguments: [String]) throws -> Run {
        let result = try basketSync(["-C", playground.path] + arguments)
        #expect(result.status == 0 || arguments.first == "sync", "\(arguments): \(result.stderr)")
        return result
    }

    func cart(_ playground: Playground) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as? [String: Any] ?? [:]
    }

    /// Holds the database's write lock, as a basket-sync process in the middle of a step does.
    final class WriteLock {
        private var handle: OpaquePointer?
        init(_ path: String) throws {
            guard sqlite3_open(path, &handle) == SQLITE_OK, sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK else {
                throw CocoaError(.fileLocking)
            }
        }
        func release() {
            sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            sqlite3_close(handle)
            handle = nil
        }
        deinit { if handle != nil { release() } }
    }

    /// Case 1: a pass that waits for the lock takes the cart in place when it gets it, never the
    /// older version it would have read before.
    @Test func aPassWaitingForTheLockTakesTheCartInPlaceThen() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        _ = try run(playground, ["push", "--id", "e1", "A=+1"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        #expect(products(playground.records("notifications.jsonl").last!) == ["A": 1])

        let lock = try WriteLock(playground.path + "/.basket-sync/state.db")
        let waiting = Child()
        waiting.executableURL = binary
        waiting.arguments = ["-C", playground.path, "sync"]
        waiting.standardOutput = FileHandle.nullDevice
        let errors = Pipe()
        waiting.standardError = errors
        try waiting.run()
        // The pass waits for the lock: SQLite's busy handler sleeps between its tries. A cart read
        // before the wait would be the version with A:1. The wait is a blocking poll on this
        // thread, not an await: under the whole suite's load an awaiting task may not run again
        // before the pass's 15 s busy timeout.
        var seen = Set<String>()
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let channel = (try? String(contentsOfFile: "/proc/\(waiting.processIdentifier)/wchan", encoding: .utf8)) ?? "gone"
            seen.insert(channel)
            if channel.contains("nanosleep") || !waiting.isRunning { break }
            usleep(500)
        }
        let stderr = waiting.isRunning ? "" : String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(waiting.isRunning && seen.contains { $0.contains("nanosleep") }, "the pass did not wait for the lock: \(seen), \(stderr)")
        try playground.writeAtomically("cart.json", cartJSON([("X", 1), ("A", 2)], syncedThrough: 1))
        lock.release()
        waiting.waitUntilExit()
        #expect(waiting.terminationStatus == 0)
        #expect(products(playground.records("notifications.jsonl").last!) == ["A": 2], "the cart in place when the pass committed")
    }

    /// Case 3: inbox events are taken in delivery order, not in the order their names sort.
    @Test func inboxEventsAreTakenInDeliveryOrderNotNameOrder() async throws {
        for watching in [false, true] {
            let playground = try syncDirectory()
            try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
            _ = try run(playground, ["sync"])
            let agent = watching ? try AgentProcess(directory: playground.path) : nil
            try await agent?.waitUntilWatching()
            // Python's mailbox.Maildir names: microseconds unpadded, so the second sorts first.
            let deliveries = [
                ("1764516000.M99999P4242Q1.mealz", #"{"id":"d1","type":"basketDelta","products":[{"id":"A","quantity":1}]}"#),
                ("1764516000.M100000P4242Q2.mealz", #"{"id":"s1","type":"basketState","products":[{"id":"A","quantity":1}]}"#),
            ]
            for (name, event) in deliveries {
                try playground.write("inbox/tmp/\(name)", event)
                try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
            }
            if let agent {
                try await eventually("both events are taken") { playground.names("inbox/cur").count == 2 }
                #expect(agent.stop() == 0)
            } else {
                _ = try run(playground, ["sync"])
            }
            let outbox = playground.records("outbox.jsonl")
            #expect(outbox.count == 1, "watching: \(watching): \(outbox)")
            #expect(outbox.first.map(products) == ["A": 1])
            _ = try run(playground, ["apply"])
            #expect(products(try cart(playground)) == ["A": 1], "watching: \(watching)")
        }
    }

    /// Case 2: the first acknowledgement arrives after the window: the batch is settled after
    /// all, and the WebView's unchanged state pushes nothing.
    @Test func aLateFirstAcknowledgementDoesNotDouble() async throws {
        let playground = try syncDirectory(#"{"pendingTimeoutSeconds": 0.2}"#)
        _ = try run(playground, ["push", "--id", "e1", "A=+2"])
        _ = try run(playground, ["sync"])
        try await eventually("the window rolls #1 back") {
            _ = try run(playground, ["sync"])
            return try run(playground, ["status", "--json"]).stdout.contains("\"rolledBack\":1")
        }
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "--state", "--id", "s1", "A=2"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        #expect(products(try cart(playground)) == ["A": 2])
        #expect(playground.records("outbox.jsonl").count == 1)
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"lateAcknowledgements\":1"))
    }

    /// Windows closing together (a backlog of batches the host never echoed) are said in one
    /// line — how many, their seqs as ranges — not a line each, in the log and in the reports a
    /// cart keeps; every batch is still rolled back.
    @Test func windowsClosingTogetherAreSaidInOneLine() async throws {
        let playground = try syncDirectory(#"{"pendingTimeoutSeconds": 0.2}"#)
        // 40 records, every fourth a redirect (no window): ten ranges of three batches.
        for index in 1...40 {
            _ = try run(playground, index % 4 == 0 ? ["push", "--redirect", "--id", "r\(index)"] : ["push", "--id", "e\(index)", "A=+1"])
        }
        _ = try run(playground, ["sync"])
        // One pass after the last window closed (a pass between two deadlines would say two lines).
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        let deadlines = (status?["pending"] as? [[String: Any]] ?? []).compactMap { ($0["deadline"] as? String).flatMap { ISO8601DateFormatter.withFractions.date(from: $0) } }
        let last = try #require(deadlines.max(), "\(String(describing: status))")
        #expect(deadlines.count == 30)
        try await eventually("the last window's deadline passes") { Date() > last.addingTimeInterval(0.05) }
        let said = try run(playground, ["sync"]).stderr
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"rolledBack\":30"))
        #expect(said.contains("30 batches rolled back (#1–#3, #5–#7, #9–#11, #13–#15, #17–#19, #21–#23, #25–#27, #29–#31 and 2 more ranges): the host did not echo them"), "\(said)")
        #expect(!said.contains("batch #1 rolled back"), "\(said)")
    }

    /// Case 4: a `syncedThrough` beyond the outbox acknowledges nothing (docs/spec.md §4 rule 4),
    /// neither the batches made before it nor those made after: none is lost. `apply` cannot know
    /// which of them the cart holds, so it refuses (74) and changes nothing until the claim is
    /// within the outbox again; then it applies them all.
    @Test func aClaimBeyondTheOutboxDoesNotLoseLaterBatches() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["push", "--id", "b1", "A=+1"])
        _ = try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 100))
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "--id", "b2", "B=+3"])
        _ = try run(playground, ["sync"])
        let refused = try basketSync(["-C", playground.path, "apply", "--json"])
        #expect(refused.status == 74 && refused.stderr.contains("cart.json: says \"syncedThrough\" 100, beyond the outbox's last record (2)"), "\(refused.stderr)")
        let untouched = try cart(playground)
        #expect(products(untouched) == ["A": 1] && untouched["syncedThrough"] as? Int == 100, "nothing written")
        // The host says the cart holds none of this directory's records.
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 0))
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[1,2]"), "\(applied.stdout)")
        #expect(products(try cart(playground)) == ["A": 2, "B": 3])
        #expect(try cart(playground)["syncedThrough"] as? Int == 2)
        _ = try run(playground, ["sync"])
        let status = try run(playground, ["status", "--json"]).stdout
        #expect(status.contains("\"pending\":[]"), "\(status)")
        #expect(status.contains("\"acknowledgementsBeyondOutbox\":1"))
    }

    /// Case 7: `syncedThrough` going back is reported, and `apply` does not apply again.
    @Test func aCartGoingBackIsReportedAndNotAppliedAgain() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        // The host restores an older cart: it says it processed #1 only, and holds A:1.
        try playground.writeAtomically("cart.json", cartJSON([("A", 1)], syncedThrough: 1))
        let sync = try run(playground, ["sync"])
        #expect(sync.stderr.contains("below the 2 it acknowledged before"), "\(sync.stderr)")
        _ = try run(playground, ["apply"])
        #expect(products(try cart(playground)) == ["A": 1], "#2 is not applied again")
        #expect(try cart(playground)["syncedThrough"] as? Int == 2)
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"acknowledgementsWentBack\":1"))
    }

    /// Case 8: a legacy host's cart written before a batch is not its echo, though the same pass
    /// takes both.
    @Test func aCartWrittenBeforeTheBatchIsNotItsEcho() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1}]}"#)
        _ = try run(playground, ["push", "--id", "e1", "A=+1"])
        _ = try run(playground, ["sync"])
        let status = try run(playground, ["status", "--json"]).stdout
        #expect(status.contains("\"settled\":0"), "\(status)")
        // The host applies it: now the cart echoes it.
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":2}]}"#)
        _ = try run(playground, ["sync"])
        #expect(try run(playground, ["status", "--json"]).stdout.contains("\"settled\":1"))
    }

    /// Cases 5, 6 and 8: a skipped payment leaves the basket open; a recorded one carries the
    /// pending batch into the new basket; a retry is answered first, whatever the mode now.
    @Test func paymentsCloseTheBasketOnlyWhenRecordedAndRetriesAreAnsweredFirst() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        _ = try run(playground, ["push", "A=+2", "B=+1"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["set-store", "S1", "--mode", "retailer"])
        try playground.write("x.json", cartJSON([("X", 1)]))
        let skipped = try run(playground, ["handle-payment", "--total", "9.99", "--order-id", "o-x", "--products", "x.json"])
        #expect(skipped.stdout.contains("\"status\":\"skipped\""))
        let afterSkip = try run(playground, ["status", "--json"]).stdout
        #expect(afterSkip.contains("\"basket\":1"), "a skipped payment leaves the basket open: \(afterSkip)")
        _ = try run(playground, ["push", "--state", "A=2", "B=1"])
        _ = try run(playground, ["sync"])
        #expect(playground.records("outbox.jsonl").count == 1, "the WebView's unchanged basket pushes nothing")

        _ = try run(playground, ["push", "C=+3"])
        _ = try run(playground, ["sync"])
        let recorded = try run(playground, ["handle-payment", "--total", "20.00", "--order-id", "o-1"])
        #expect(recorded.stdout.contains("\"status\":\"recorded\""))
        let afterPayment = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((afterPayment?["pending"] as? [Any])?.count == 1, "#2 carries into the new basket")
        let basis = (afterPayment?["mealz"] as? [[String: Any]] ?? []).reduce(into: [String: Int]()) { $0[$1["id"] as! String] = $1["basis"] as? Int }
        #expect(basis.filter { $0.value > 0 } == ["C": 3])

        _ = try run(playground, ["set-store", "S1", "--mode", "standalone"])
        let retry = try basketSync(["-C", playground.path, "handle-payment", "--total", "20.00", "--order-id", "o-1"])
        #expect(retry.status == 0, "\(retry.stderr)")
        #expect(retry.stdout.contains("already recorded"))
    }

    // MARK: Deliveries, claims, shared lines, payments, hosts moving to apply

    /// An event delivered by link() into new/ (Python's mailbox.Maildir) wakes the agent and
    /// keeps its place in the order.
    @Test func anEventDeliveredByLinkIsTakenAtOnceAndInOrder() async throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        let agent = try AgentProcess(directory: playground.path)
        try await agent.waitUntilWatching()
        let tmp = playground.path + "/inbox/tmp/1764516000.M1P1Q1.py"
        try #"{"id":"py-1","type":"basketDelta","products":[{"id":"A","quantity":2}]}"#.write(toFile: tmp, atomically: false, encoding: .utf8)
        #expect(link(tmp, playground.path + "/inbox/new/1764516000.M1P1Q1.py") == 0)
        #expect(unlink(tmp) == 0)
        try await eventually("the linked event is taken") { playground.records("outbox.jsonl").count == 1 }
        _ = try run(playground, ["push", "--state", "A=2"])
        try await eventually("the state is taken") { playground.names("inbox/cur").count == 2 }
        #expect(agent.stop() == 0)
        _ = try run(playground, ["apply"])
        #expect(products(try cart(playground)) == ["A": 2])
    }

    /// A claim beyond the outbox, left in the cart while the outbox grows up to it, never settles
    /// anything (docs/spec.md §4 rule 4: it claims records that did not exist when the cart was
    /// written, a counter that says nothing true) — in a new process either — and apply delivers
    /// every record after what was acknowledged.
    @Test func aStaleClaimBeyondTheOutboxNeverComesToCoverLaterBatches() throws {
        let playground = try syncDirectory()
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 5))
        _ = try run(playground, ["sync"])
        for _ in 0..<3 { _ = try run(playground, ["push", "B=+1"]) }
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["sync"])
        let status = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((status?["pending"] as? [Any])?.count == 5, "#1–#5 wait for a cart that acknowledges them")
        _ = try run(playground, ["apply"])
        #expect(products(try cart(playground)) == ["A": 4, "B": 3])
        _ = try run(playground, ["sync"])
        let settled = try JSONSerialization.jsonObject(with: Data(try run(playground, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect((settled?["pending"] as? [Any])?.isEmpty == true)
    }

    /// A Mealz removal from a line that also holds the shopper's units takes Mealz's units first
    /// (docs/spec.md §4, the share): once the host applied it, the line is the shopper's alone,
    /// Mealz is told so, a payment counts none of it as Mealz's, and the WebView repeating what it
    /// was told pushes nothing.
    @Test func aMealzRemovalTakesMealzUnitsFirst() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([("X", 4)], syncedThrough: 0))
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "A=+2"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", cartJSON([("X", 4), ("A", 5)], syncedThrough: 1))
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "--state", "A=3"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        _ = try run(playground, ["sync"])
        #expect(products(try cart(playground)) == ["X": 4, "A": 3])
        #expect(products(playground.records("notifications.jsonl").last!) == [:], "A is the shopper's alone")
        _ = try run(playground, ["push", "--state"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        #expect(products(try cart(playground)) == ["X": 4, "A": 3])
        _ = try run(playground, ["set-store", "s1", "--mode", "retailer"])
        _ = try run(playground, ["handle-payment", "--total", "9.00", "--order-id", "o1"])
        #expect(products(playground.records("payments.jsonl").last!, key: "mealzProducts") == [:])
    }

    /// A payment whose products are the cart takes the cart first: what apply just wrote
    /// counts as Mealz's.
    @Test func aPaymentTakesTheCartItPaysFirst() throws {
        let playground = try syncDirectory()
        try playground.writeAtomically("cart.json", cartJSON([], syncedThrough: 0))
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["set-store", "S", "--mode", "retailer"])
        _ = try run(playground, ["push", "A=+2"])
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["apply"])
        let paid = try run(playground, ["handle-payment", "--total", "5.00", "--order-id", "o1"])
        #expect(paid.stdout.contains("\"status\":\"recorded\""), "\(paid.stdout)")
        #expect(paid.stdout.contains("\"mealzProducts\":[{\"id\":\"A\",\"quantity\":2}]"))
    }

    /// A legacy host that moves to `apply` does not get the batches its carts echoed again.
    @Test func aLegacyHostMovingToApplyGetsNoEchoedBatchAgain() throws {
        let playground = try syncDirectory(#"{"pendingTimeoutSeconds": 30}"#)
        try playground.writeAtomically("cart.json", #"{"products":[]}"#)
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        try playground.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1}]}"#)
        _ = try run(playground, ["sync"])
        _ = try run(playground, ["push", "A=+1"])
        _ = try run(playground, ["sync"])
        let applied = try run(playground, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[2]"), "\(applied.stdout)")
        #expect(products(try cart(playground)) == ["A": 2])
    }

    /// apply takes the cart in place before it decides where to start,
    /// whether or not a sync ran since the host wrote it.
    @Test func applyTakesTheCartInPlaceFirst() throws {
        let legacy = try syncDirectory(#"{"pendingTimeoutSeconds": 30}"#)
        try legacy.writeAtomically("cart.json", #"{"products":[]}"#)
        _ = try run(legacy, ["sync"])
        _ = try run(legacy, ["push", "A=+1"])
        _ = try run(legacy, ["sync"])
        try legacy.writeAtomically("cart.json", #"{"products":[{"id":"A","quantity":1}]}"#)  // the host applied #1
        let applied = try run(legacy, ["apply", "--json"])
        #expect(applied.stdout.contains("\"applied\":[]"), "\(applied.stdout)")
        #expect(products(try cart(legacy)) == ["A": 1])

        let beyond = try syncDirectory()
        _ = try run(beyond, ["push", "A=+1"])
        _ = try run(beyond, ["push", "A=+1"])
        _ = try run(beyond, ["sync"])
        try beyond.writeAtomically("cart.json", cartJSON([("A", 2)], syncedThrough: 5))
        // A claim beyond the outbox acknowledges nothing (status: progress 0), and where the host
        // got to cannot be known: wait (going by the cart) and apply agree, both refusing (74).
        let status = try JSONSerialization.jsonObject(with: Data(try run(beyond, ["status", "--json"]).stdout.utf8)) as? [String: Any]
        #expect(status?["hostProgress"] as? Int == 0, "\(String(describing: status))")
        for command in [["wait", "--timeout", "0"], ["apply", "--json"]] {
            let refused = try basketSync(["-C", beyond.path] + command)
            #expect(refused.status == 74 && refused.stderr.contains("beyond the outbox's last record (2)") && refused.stdout.isEmpty, "\(command): \(refused.stdout) \(refused.stderr)")
        }
        // Given its own progress (--after), wait does not go by the cart.
        let listed = try run(beyond, ["wait", "--after", "0", "--timeout", "0"])
        #expect(listed.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .compactMap { $0["seq"] as? Int } == [1, 2], "\(listed.stdout)")
    }
}
