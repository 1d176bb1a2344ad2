import Foundation
import Testing

/// docs/spec.md §4 rule 7: a retried checkout is answered as a duplicate before anything else, its
/// completion runs until it has succeeded once and never after, and a retry that differs is
/// refused.
@Suite struct PaymentRetryTests {
    /// A sync directory in retailer mode whose cart holds A, a Mealz line the host applied.
    func paidReadyDirectory() throws -> Playground {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        try mealzAdds("A=+2", playground)
        return playground
    }

    func run(_ playground: Playground, _ arguments: [String]) throws -> Run {
        try basketSync(["-C", playground.path] + arguments)
    }

    /// Mealz pushes a delta, the host applies it, basket-sync takes the cart.
    func mealzAdds(_ delta: String, _ playground: Playground) throws {
        #expect(try run(playground, ["push", delta]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
    }

    /// The host's completion: empties the cart (what a checkout does), and counts its runs.
    func clearingCompletion(_ playground: Playground, exit status: Int = 0) -> [String] {
        ["/bin/sh", "-c", "echo run >> \"$1\"; printf '{\"products\": []}\\n' > cart.json.tmp && mv cart.json.tmp cart.json; exit \(status)", "sh", playground.path + "/runs"]
    }

    func runs(_ playground: Playground) -> Int {
        playground.read("runs").split(separator: "\n").count
    }

    @Test func aRetriedCheckoutNeverClearsTheCartTheShopperFilledSince() throws {
        let playground = try paidReadyDirectory()
        let paid = try run(playground, ["handle-payment", "--total", "23.40", "--order-id", "o-77", "--then"] + clearingCompletion(playground))
        #expect(paid.status == 0, "\(paid.stderr)")
        #expect(runs(playground) == 1)
        #expect(try run(playground, ["sync"]).status == 0)
        // The shopper fills a new cart through Mealz.
        try mealzAdds("B=+3", playground)
        #expect(playground.read("cart.json").contains("\"B\""))

        let retry = try run(playground, ["handle-payment", "--total", "23.40", "--order-id", "o-77", "--then"] + clearingCompletion(playground))
        #expect(retry.status == 0, "a duplicate is not an error: \(retry.stderr)")
        #expect(retry.stdout.contains("order o-77 was already recorded as payment #1; not recorded again (a duplicate)"), "\(retry.stdout)")
        #expect(retry.stdout.contains("its completion finished at "), "\(retry.stdout)")
        #expect(runs(playground) == 1, "the completion that succeeded never runs again")
        #expect(playground.read("cart.json").contains("\"B\""), "the new cart is kept")

        let json = try run(playground, ["handle-payment", "--total", "23.4", "--order-id", "o-77", "--json", "--then"] + clearingCompletion(playground))
        #expect(json.status == 0)
        let answer = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as! [String: Any]
        #expect(answer["duplicate"] as? Bool == true, "\(json.stdout)")
        #expect(answer["seq"] as? Int == 1)
        #expect((answer["payment"] as? [String: Any])?["orderId"] as? String == "o-77")
        #expect((answer["completion"] as? [String: Any])?["ran"] as? Bool == false)
        #expect(runs(playground) == 1)
        #expect(playground.records("payments.jsonl").count == 1, "nothing recorded twice")
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(products(playground.records("notifications.jsonl").last!) == ["B": 3], "Mealz keeps the new basket")
    }

    @Test func aRetryThatDiffersIsRefusedNamingBoth() throws {
        let playground = try paidReadyDirectory()
        try playground.write("bought.json", "[{\"id\": \"A\", \"quantity\": 2}, {\"id\": \"X\", \"quantity\": 1}]")
        #expect(try run(playground, ["handle-payment", "--total", "23.40", "--order-id", "o-77", "--products", "bought.json"]).status == 0)

        let otherTotal = try run(playground, ["handle-payment", "--total", "99.00", "--order-id", "o-77", "--then"] + clearingCompletion(playground))
        #expect(otherTotal.status == 65)
        #expect(otherTotal.stderr.contains("order \"o-77\" was recorded as payment #1, and this retry differs: the total 99.00 is not the 23.40 recorded"), "\(otherTotal.stderr)")
        #expect(!FileManager.default.fileExists(atPath: playground.path + "/runs"), "no completion for a refused retry")

        try playground.write("other.json", "[{\"id\": \"A\", \"quantity\": 1}]")
        let otherProducts = try run(playground, ["handle-payment", "--total", "23.40", "--order-id", "o-77", "--products", "other.json"])
        #expect(otherProducts.status == 65)
        #expect(otherProducts.stderr.contains("the products {\"A\": 1} are not the {\"A\": 2, \"X\": 1} recorded"), "\(otherProducts.stderr)")

        // The same purchase written another way is the same payment: lines in another order, split.
        try playground.write("same.json", "[{\"id\": \"X\", \"quantity\": 1}, {\"id\": \"A\", \"quantity\": 1}, {\"id\": \"A\", \"quantity\": 1}]")
        let same = try run(playground, ["handle-payment", "--total", "23.400", "--order-id", "o-77", "--products", "same.json"])
        #expect(same.status == 0, "\(same.stderr)")
        #expect(same.stdout.contains("(a duplicate)"))
        // The default list (the current cart, emptied by the checkout since) is not compared.
        try playground.write("cart.json", "{\"products\": []}")
        #expect(try run(playground, ["handle-payment", "--total", "23.40", "--order-id", "o-77"]).status == 0)
        #expect(playground.records("payments.jsonl").count == 1)
    }

    @Test func aCompletionThatFailedOrDiedRunsAgainUntilItSucceedsOnce() throws {
        let playground = try paidReadyDirectory()
        let failed = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + clearingCompletion(playground, exit: 3))
        #expect(failed.status == 3)
        #expect(failed.stderr.contains("a retry of handle-payment runs the completion again"))
        // The next attempt's completion dies (killed by a signal): it runs again.
        let killer = ["/bin/sh", "-c", "echo run >> \"$1\"; kill -KILL $$", "sh", playground.path + "/runs"]
        let died = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + killer)
        #expect(died.status == 128 + SIGKILL, "the completion was killed: \(died)")
        #expect(runs(playground) == 2)
        let succeeded = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then"] + clearingCompletion(playground))
        #expect(succeeded.status == 0, "\(succeeded.stderr)")
        let answer = try JSONSerialization.jsonObject(with: Data(succeeded.stdout.utf8)) as! [String: Any]
        #expect(answer["duplicate"] as? Bool == true)
        #expect((answer["completion"] as? [String: Any])?["status"] as? Int == 0)
        #expect(runs(playground) == 3)
        #expect(try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + clearingCompletion(playground)).status == 0)
        #expect(runs(playground) == 3, "never after it succeeded")
        #expect(playground.records("payments.jsonl").count == 1)
    }

    @Test func twoRetriesAtOnceRunTheCompletionOnce() async throws {
        let playground = try paidReadyDirectory()
        #expect(try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then", "false"]).status == 1)
        // The completion holds until the test says go, so that the second retry comes while it runs.
        let go = playground.path + "/go"
        // Released whatever happens: a held completion waits for this file (for ten minutes at
        // most: under a full suite this test's task may wait long for a thread).
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let slow = ["/bin/sh", "-c", "echo run >> \"$1\"; i=0; while [ ! -e \"$2\" ] && [ $i -lt 60000 ]; do sleep 0.01; i=$((i+1)); done", "sh", playground.path + "/runs", go]
        func retry(_ name: String) throws -> Child {
            try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + slow, name: name)
        }
        let first = try retry("first")
        try await eventually("the first retry runs its completion") { runs(playground) == 1 }
        let second = try retry("second")
        try await waitsForTheLock(second, playground, name: "second")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        first.waitUntilExit()
        second.waitUntilExit()
        #expect(first.terminationStatus == 0 && second.terminationStatus == 0)
        #expect(runs(playground) == 1, "the completion ran once for two retries at once")
    }

    /// Waits until `child` says it waits for the order's lock (it says so just before it blocks
    /// on it), and checks it is still running then.
    func waitsForTheLock(_ child: Child, _ playground: Playground, name: String) async throws {
        try await eventually("\(name) waits for the order's lock (its stderr: \(playground.read("stderr-\(name)")))") {
            playground.read("stderr-\(name)").contains("is running (or its completion is): waiting for it") || !child.isRunning
        }
        #expect(child.isRunning, "\(name) did not wait: \(playground.read("stderr-\(name)"))")
    }

    /// A completion that logs its start and end and holds until `go` exists.
    func heldCompletion(_ playground: Playground, name: String, go: String) -> [String] {
        ["/bin/sh", "-c", "echo \"start $3\" >> \"$1\"; i=0; while [ ! -e \"$2\" ] && [ $i -lt 60000 ]; do sleep 0.01; i=$((i+1)); done; echo \"end $3\" >> \"$1\"",
         "sh", playground.path + "/runs", go, name]
    }

    /// Starts basket-sync in the background, its stderr in `stderr-NAME` beside the sync directory's files.
    func started(_ playground: Playground, _ arguments: [String], name: String = "child") throws -> Child {
        try startedInBackground(["-C", playground.path] + arguments, errors: playground.path + "/stderr-\(name)")
    }

    /// handle-payment killed while its completion runs: the completion goes on under its
    /// supervisor, which records its end; a retry meanwhile waits for it (it keeps the order's
    /// lock) and then finds it finished — a completion that exited 0 never runs twice.
    @Test func aKilledHandlePaymentLeavesItsCompletionsEndRecorded() async throws {
        let playground = try paidReadyDirectory()
        let go = playground.path + "/go"
        // Released whatever happens: a held completion waits for this file (for ten minutes at
        // most: under a full suite this test's task may wait long for a thread).
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let first = try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + heldCompletion(playground, name: "first", go: go), name: "first")
        try await eventually("the first completion runs") { playground.read("runs").contains("start first") }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        let second = try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then"] + heldCompletion(playground, name: "second", go: go), name: "second")
        try await waitsForTheLock(second, playground, name: "second")
        #expect(!playground.read("runs").contains("start second"))
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        second.waitUntilExit()
        #expect(second.terminationStatus == 0, "\(playground.read("stderr-second"))")
        #expect(playground.read("runs") == "start first\nend first\n", "the completion that exited 0 ran once: \(playground.read("runs"))")
        // After the killed attempt's completion ended (nobody waiting for it), a retry finds it finished.
        let later = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + heldCompletion(playground, name: "third", go: go))
        #expect(later.status == 0 && later.stdout.contains("its completion finished at "), "\(later)")
        #expect(playground.read("runs") == "start first\nend first\n")
    }

    /// The supervisor itself goes on when handle-payment is killed before its completion ends,
    /// with nobody retrying: the completion's end is in the database all the same.
    @Test func theCompletionsEndIsRecordedWithNobodyWaiting() async throws {
        let playground = try paidReadyDirectory()
        let go = playground.path + "/go"
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let first = try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + heldCompletion(playground, name: "first", go: go), name: "first")
        try await eventually("the completion runs") { playground.read("runs").contains("start first") }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        try await eventually("the completion ended") { playground.read("runs").contains("end first") }
        let retry = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then"] + heldCompletion(playground, name: "retry", go: go))
        #expect(retry.status == 0, "\(retry)")
        let answer = try JSONSerialization.jsonObject(with: Data(retry.stdout.utf8)) as! [String: Any]
        #expect((answer["completion"] as? [String: Any])?["ran"] as? Bool == false, "\(retry.stdout)")
        #expect(playground.read("runs") == "start first\nend first\n")
    }

    /// The supervisor killed after its completion exited 0 but before it could record that (the
    /// database held by another writer): the completion is still unreaped then — its end is
    /// recorded before it is reaped — so handle-payment, given the zombie, reads its status and
    /// records it; a retry finds it finished and runs nothing.
    /// And with nobody killed: the database held by another writer for longer than the busy
    /// timeout when the completion ends — the supervisor waits however long (it says so), and
    /// the end is recorded.
    @Test(arguments: [true, false])
    func theCompletionsEndHeldUpByTheDatabaseIsNeverLost(killSupervisor: Bool) async throws {
        let playground = try paidReadyDirectory()
        let go = playground.path + "/go", release = playground.path + "/release"
        defer { for flag in [go, release] { _ = FileManager.default.createFile(atPath: flag, contents: nil) } }
        let completion = ["/bin/sh", "-c", "echo $$ > \"$1\"; echo $PPID > \"$2\"; echo run >> \"$3\"; i=0; while [ ! -e \"$4\" ] && [ $i -lt 60000 ]; do sleep 0.01; i=$((i+1)); done",
                          "sh", playground.path + "/completion.pid", playground.path + "/supervisor.pid", playground.path + "/runs", go]
        let paying = try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then"] + completion, name: "paying")
        try await eventually("the completion runs") { playground.read("runs") == "run\n" }
        // Another writer holds the database until told.
        let holder = Child()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = ["-c", """
            import os, sqlite3, sys, time
            c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
            c.execute("BEGIN IMMEDIATE")
            open(sys.argv[2], "w").close()
            for _ in range(60000):
                if os.path.exists(sys.argv[3]) or not os.path.isdir(os.path.dirname(sys.argv[3])): break
                time.sleep(0.01)
            c.execute("ROLLBACK")
            """, playground.path + "/.basket-sync/state.db", playground.path + "/locked", release]
        try holder.run()
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() } }
        try await eventually("the database is held") { FileManager.default.fileExists(atPath: playground.path + "/locked") }
        let pid = Int32(playground.read("completion.pid").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let supervisor = Int32(playground.read("supervisor.pid").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        #expect(pid > 0 && supervisor > 0 && supervisor != paying.processIdentifier)
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        // Exited 0 and not reaped: its supervisor waits for the database to record it first.
        try await eventually("the completion ended, unreaped") { processState(pid) == "Z" }
        if killSupervisor {
            kill(supervisor, SIGKILL)
        } else {
            try await eventually("the supervisor outlasts the busy timeout", timeout: 120) { playground.read("stderr-paying").contains("waits for the database") }
        }
        _ = FileManager.default.createFile(atPath: release, contents: nil)
        holder.waitUntilExit()
        paying.waitUntilExit()
        #expect(paying.terminationStatus == 0, "\(playground.read("stderr-paying"))")
        let retry = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then"] + completion)
        let answer = try JSONSerialization.jsonObject(with: Data(retry.stdout.utf8)) as? [String: Any]
        #expect((answer?["completion"] as? [String: Any])?["ran"] as? Bool == false, "finished before: \(retry.stdout)")
        #expect(playground.read("runs") == "run\n", "the completion that exited 0 never runs again")
    }

    /// The supervisor killed alone while the completion runs: handle-payment (the subreaper its
    /// orphaned completion is given to) waits for the completion and records its end — a retry
    /// finds it finished.
    @Test func theSupervisorKilledAloneLeavesTheEndToHandlePayment() async throws {
        let playground = try paidReadyDirectory()
        // Five times: the supervisor is killed as soon as the completion starts, before or after
        // it told handle-payment the completion's pid.
        for round in 1...5 {
            let order = "o-\(round)", go = playground.path + "/go-\(round)", runs = playground.path + "/runs-\(round)"
            defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
            let completion = ["/bin/sh", "-c", "echo $PPID > \"$1\"; echo start >> \"$2\"; i=0; while [ ! -e \"$3\" ] && [ $i -lt 60000 ]; do sleep 0.01; i=$((i+1)); done; echo end >> \"$2\"",
                              "sh", playground.path + "/supervisor-\(round).pid", runs, go]
            let paying = try started(playground, ["handle-payment", "--total", "5", "--order-id", order, "--json", "--then"] + completion, name: "paying-\(round)")
            try await eventually("the completion runs") { playground.read("runs-\(round)").contains("start") }
            let supervisor = Int32(playground.read("supervisor-\(round).pid").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            #expect(supervisor > 0 && supervisor != paying.processIdentifier)
            kill(supervisor, SIGKILL)
            _ = FileManager.default.createFile(atPath: go, contents: nil)
            paying.waitUntilExit()
            #expect(paying.terminationStatus == 0, "round \(round): \(playground.read("stderr-paying-\(round)"))")
            #expect(playground.read("runs-\(round)") == "start\nend\n")
            let retry = try run(playground, ["handle-payment", "--total", "5", "--order-id", order, "--json", "--then"] + completion)
            let answer = try JSONSerialization.jsonObject(with: Data(retry.stdout.utf8)) as? [String: Any]
            #expect((answer?["completion"] as? [String: Any])?["ran"] as? Bool == false, "round \(round), finished before: \(retry.stdout)")
            #expect(playground.read("runs-\(round)") == "start\nend\n", "round \(round): the completion that exited 0 never runs again")
        }
    }

    /// With --json, standard output holds the JSON alone: what the completion prints goes to
    /// standard error.
    @Test func withJSONTheCompletionsOutputGoesToStandardError() throws {
        let playground = try paidReadyDirectory()
        let paid = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then", "/bin/sh", "-c", "echo cleared; echo noted >&2"])
        #expect(paid.status == 0, "\(paid)")
        let answer = try JSONSerialization.jsonObject(with: Data(paid.stdout.utf8)) as? [String: Any]
        #expect(answer?["duplicate"] as? Bool == false, "standard output is one JSON object: \(paid.stdout)")
        #expect(paid.stderr.contains("cleared") && paid.stderr.contains("noted"), "\(paid.stderr)")
        // Without --json, the completion's output stays on standard output.
        let plain = try run(playground, ["handle-payment", "--total", "6", "--order-id", "o-2", "--then", "/bin/sh", "-c", "echo cleared"])
        #expect(plain.stdout.contains("cleared"), "\(plain)")
    }

    /// A completion that cannot be started (missing, not executable): the payment is recorded
    /// all the same and said, in JSON too, and the command exits 66; a retry says it again.
    @Test func aCompletionThatCannotStartIsSaidAndThePaymentKept() throws {
        let playground = try paidReadyDirectory()
        try playground.write("not-executable", "#!/bin/sh\n")
        for (attempt, program) in [(1, "/nonexistent/program"), (2, playground.path + "/not-executable")] {
            let run = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json", "--then", program])
            #expect(run.status == 66, "\(run)")
            let answer = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
            #expect(answer?["duplicate"] as? Bool == (attempt == 2) && answer?["seq"] as? Int == 1, "\(run.stdout)")
            let reason = (answer?["completion"] as? [String: Any])?["error"] as? String ?? ""
            #expect(reason.contains(attempt == 1 ? "no such program" : "not executable"), "\(reason)")
            #expect(run.stderr.contains("cannot run the completion"), "\(run.stderr)")
        }
        #expect(playground.records("payments.jsonl").filter { $0["type"] as? String == "handlePayment" }.count == 1)
    }

    /// The cart is taken first with --products too: Mealz's line that the cart on disk shows
    /// applied (acknowledged, not yet taken by a pass) is Mealz's in the payment.
    @Test func theCartIsTakenFirstWhenProductsAreGiven() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", "A=+2"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        // The host applies record 1 its own way; no pass runs before the payment.
        try playground.write("cart.json", cartJSON([("X", 1), ("A", 2)], syncedThrough: 1))
        try playground.write("bought.json", cartJSON([("X", 1), ("A", 2)], syncedThrough: nil))
        for command in ["payment-started", "handle-payment"] {
            let paid = try run(playground, [command, "--total", "9", "--order-id", "o-\(command)", "--products", "bought.json", "--json"])
            #expect(paid.status == 0, "\(paid)")
            let record = (try JSONSerialization.jsonObject(with: Data(paid.stdout.utf8)) as? [String: Any])?["payment"] as? [String: Any]
            #expect(record?["status"] as? String == "recorded", "\(command): A, applied in the cart on disk, is Mealz's: \(paid.stdout)")
        }
        let notifications = playground.records("notifications.jsonl")
        #expect(notifications.last?["basket"] as? Int == 2, "the recorded payment closed basket 1: \(notifications)")
    }

    /// An order is kept by retention for the retention counted from its last activity: a late
    /// retry that completes it makes it young again, and the next retry is still a duplicate.
    @Test func retentionCountsAnOrderFromItsLastActivity() async throws {
        let playground = try paidReadyDirectory()
        let retention = 3.0
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": \(retention / 86_400)}}")
        let failed = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + clearingCompletion(playground, exit: 3))
        #expect(failed.status == 3)
        let recorded = Date()
        try await eventually("the order is older than the retention") { Date() > recorded.addingTimeInterval(retention + 0.2) }
        #expect(try run(playground, ["sync"]).status == 0)
        let completed = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + clearingCompletion(playground))
        #expect(completed.status == 0 && completed.stdout.contains("had never exited 0: run again"), "an unfinished order is kept: \(completed)")
        let lastActivity = Date()
        #expect(try run(playground, ["sync"]).status == 0)
        let passStarted = Date()
        let retry = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--json"])
        // Decided only when the pass ran within the retention of the completion's end (always,
        // unless this machine stalled for seconds): otherwise the order may rightly be gone.
        if passStarted < lastActivity.addingTimeInterval(retention) {
            let answer = try JSONSerialization.jsonObject(with: Data(retry.stdout.utf8)) as? [String: Any]
            #expect(answer?["duplicate"] as? Bool == true, "the order's last activity was its completion: \(retry)")
            #expect(playground.records("payments.jsonl").filter { $0["type"] as? String == "handlePayment" }.count == 1)
        }
    }
    /// A lock per order: a slow completion holds up no other payment, and a completion that
    /// records another order does not wait for ever.
    @Test func otherOrdersAreNotHeldUpByACompletion() async throws {
        let playground = try paidReadyDirectory()
        let go = playground.path + "/go"
        // Released whatever happens: a held completion waits for this file (for ten minutes at
        // most: under a full suite this test's task may wait long for a thread).
        defer { _ = FileManager.default.createFile(atPath: go, contents: nil) }
        let slow = try started(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then"] + heldCompletion(playground, name: "o-1", go: go), name: "o-1")
        try await eventually("o-1's completion runs") { playground.read("runs").contains("start o-1") }
        let other = try basketSync(["-C", playground.path, "handle-payment", "--total", "7", "--order-id", "o-2", "--then",
                                    binary.path, "-C", playground.path, "handle-payment", "--total", "8", "--order-id", "o-3"], killAfter: 60)
        #expect(other?.status == 0, "o-2, whose completion records o-3, went through while o-1's completion runs: \(String(describing: other))")
        _ = FileManager.default.createFile(atPath: go, contents: nil)
        slow.waitUntilExit()
        #expect(slow.terminationStatus == 0)
        #expect(Set(playground.records("payments.jsonl").compactMap { $0["orderId"] as? String }) == ["o-1", "o-2", "o-3"])
    }

    /// The completion inherits neither the database nor the JSON Lines files: it gets stdin,
    /// stdout, stderr and the order's lock as descriptor 3, nothing else.
    @Test func theCompletionGetsTheOrdersLockAsDescriptor3AndNothingElse() throws {
        let playground = try paidReadyDirectory()
        let paid = try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1", "--then",
                                        "/bin/sh", "-c", "for fd in /proc/$$/fd/*; do echo \"${fd##*/} $(readlink $fd)\"; done > \"$0\"", playground.path + "/fds"])
        #expect(paid.status == 0, "\(paid.stderr)")
        let open = playground.read("fds").split(separator: "\n").map(String.init)
        #expect(open.contains { $0.hasPrefix("3 ") && $0.hasSuffix("/.basket-sync/payments.lock") }, "\(open)")
        #expect(!open.contains { $0.contains("state.db") || $0.contains(".jsonl") }, "\(open)")
        // Beyond 0-3, only the shell's own pipes (its command substitution).
        #expect(open.filter { !["0 ", "1 ", "2 ", "3 "].contains(String($0.prefix(2))) && !$0.contains(" pipe:") }.isEmpty, "\(open)")
    }

    @Test func paymentStartedForAnOrderAlreadyPaidRecordsNothing() throws {
        let playground = try paidReadyDirectory()
        let started = try run(playground, ["payment-started", "--total", "5", "--order-id", "o-1", "--json"])
        #expect((try JSONSerialization.jsonObject(with: Data(started.stdout.utf8)) as! [String: Any])["duplicate"] as? Bool == false, "\(started.stdout)")
        #expect(try run(playground, ["handle-payment", "--total", "5", "--order-id", "o-1"]).status == 0)
        let late = try run(playground, ["payment-started", "--total", "5", "--order-id", "o-1", "--json"])
        #expect(late.status == 0)
        let answer = try JSONSerialization.jsonObject(with: Data(late.stdout.utf8)) as! [String: Any]
        #expect(answer["duplicate"] as? Bool == true, "\(late.stdout)")
        #expect(answer["seq"] as? Int == 2)
        #expect(try run(playground, ["payment-started", "--total", "5", "--order-id", "o-1"]).stdout.contains("already recorded as payment #2"))
        // The cart gone (a completion that empties it): the duplicate is all that is said —
        // nothing is read, nothing said skipped.
        try FileManager.default.removeItem(atPath: playground.path + "/cart.json")
        let gone = try run(playground, ["payment-started", "--total", "5", "--order-id", "o-1"])
        #expect(gone.status == 0 && gone.stdout.contains("already recorded as payment #2") && !gone.stderr.contains("skipped"), "\(gone.stdout) \(gone.stderr)")
        #expect(playground.records("payments.jsonl").map { $0["type"] as! String } == ["paymentStarted", "handlePayment"])
    }
}

/// The state letter of process `pid` in /proc (R, S, Z…), or nil when it is gone.
func processState(_ pid: Int32) -> String? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("State:") }) else { return nil }
    return line.dropFirst("State:".count).trimmingCharacters(in: .whitespaces).first.map(String.init)
}
