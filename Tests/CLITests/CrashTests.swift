import Foundation
import Testing
import TestSupport

/// SIGKILL the agent at random instants while events and carts flow: nothing acknowledged is lost
/// or doubled, seq has no gap, and no JSON Lines file shows a torn line a reader could take.
@Suite struct CrashTests {
    /// Delivers a Mealz event the Maildir way, as the Mealz side does.
    func deliver(_ playground: Playground, id: String, sku: String, quantity: Int = 1) throws {
        let name = "\(id).crash"
        try playground.write("inbox/tmp/\(name)", "{\"id\":\"\(id)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"\(sku)\",\"quantity\":\(quantity)}]}\n")
        try FileManager.default.moveItem(at: playground.url("inbox/tmp/\(name)"), to: playground.url("inbox/new/\(name)"))
    }

    func checkInvariants(_ playground: Playground, context: String) {
        checkCrashInvariants(playground, context: context)
    }

    @Test func killedAtRandomInstantsTheAgentLosesAndDoublesNothing() async throws {
        let kills = Knobs.value("BASKET_SYNC_KILLS", default: 150)
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try Playground()
        #expect(try basketSync(["-C", playground.path, "init"]).status == 0)

        var delivered = 0
        for round in 0..<kills {
            let agent = try AgentProcess(directory: playground.path)
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                try deliver(playground, id: "e\(delivered)", sku: "S\(delivered % 7)")
                delivered += 1
            }
            let acknowledged = playground.records("outbox.jsonl").count
            try playground.writeAtomically("cart.json", cartJSON([("S0", round % 5), ("X", 1)], syncedThrough: acknowledged))
            usleep(UInt32.random(in: 0...25_000, using: &rng))
            #expect(agent.stop(SIGKILL) == SIGKILL)
            checkInvariants(playground, context: "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), after kill \(round + 1)")
        }

        // After the storm: one pass takes what is left; every event is in the outbox exactly once.
        let sync = try basketSync(["-C", playground.path, "sync"])
        #expect(sync.status == 0, "\(sync.stderr)")
        checkInvariants(playground, context: "seed \(seed), after the final sync")
        let sources = playground.records("outbox.jsonl").compactMap { $0["source"] as? String }
        #expect(sources.sorted() == (0..<delivered).map { "e\($0)" }.sorted(), "seed \(seed): every delivered event exactly once")
        #expect(playground.names("inbox/new").isEmpty)
        for file in ["outbox.jsonl", "notifications.jsonl"] {
            #expect(playground.read(file).hasSuffix("\n"), "\(file) ends with a complete line")
        }
        print("crash test: seed \(seed), \(kills) kills survived, \(delivered) events checked")
    }
}


/// The storm: the agent and the one-shot commands (apply, payments, sync) killed at random
/// instants while events flow; after it, the host cart holds every delta exactly once.
@Suite struct StormTests {
    /// Starts the binary without waiting for it.
    func spawn(_ arguments: [String]) throws -> Child {
        let process = Child()
        process.executableURL = binary
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return process
    }

    func checkPayments(_ playground: Playground, context: String) {
        let payments = playground.records("payments.jsonl")
        #expect(payments.map { $0["seq"] as! Int } == Array(1..<(payments.count + 1)), "\(context): payment seqs")
        let orders = payments.filter { $0["type"] as? String == "handlePayment" }.compactMap { $0["orderId"] as? String }
        #expect(Set(orders).count == orders.count, "\(context): an order was recorded twice: \(orders)")
    }

    @Test func killedAnywhereTheAgentAndTheCommandsLoseAndDoubleNothing() async throws {
        let rounds = Knobs.value("BASKET_SYNC_STORM_ROUNDS", default: 100)
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let playground = try Playground()
        let dir = playground.path
        #expect(try basketSync(["-C", dir, "init"]).status == 0)
        #expect(try basketSync(["-C", dir, "set-store", "s", "--mode", "retailer"]).status == 0)
        try playground.write("cart.json", cartJSON([("X", 1)], syncedThrough: 0))
        let crash = CrashTests()

        var agent: AgentProcess? = try AgentProcess(directory: dir)
        var delivered = 0
        var kills = 0
        var orders = 0
        var stops = 0
        for round in 0..<rounds {
            for _ in 0..<Int.random(in: 0...2, using: &rng) {
                let sku = "S\(Int.random(in: 0..<5, using: &rng))"
                let quantity = Int.random(in: -2...3, using: &rng)
                try crash.deliver(playground, id: "e\(delivered)", sku: sku, quantity: quantity == 0 ? 1 : quantity)
                delivered += 1
            }
            let command: [String]
            switch Int.random(in: 0..<4, using: &rng) {
            case 0, 1: command = ["apply"]
            case 2:
                orders += Int.random(in: 0...1, using: &rng)
                command = ["handle-payment", "--total", "9.90", "--order-id", "o\(orders)"]
            default: command = ["sync"]
            }
            // Now and then a second pass races it, stopped (SIGSTOP) at a random instant and
            // continued once the first is done: overlapping cron syncs, a sync beside the agent.
            let racer = Int.random(in: 0..<4, using: &rng) == 0 ? try spawn(["-C", dir, "sync"]) : nil
            if let racer {
                usleep(UInt32.random(in: 0...5_000, using: &rng))
                kill(racer.processIdentifier, SIGSTOP)
                stops += 1
            }
            let oneShot = try spawn(["-C", dir] + command)
            usleep(UInt32.random(in: 0...20_000, using: &rng))
            if oneShot.isRunning {
                kill(oneShot.processIdentifier, SIGKILL)
                kills += 1
            }
            oneShot.waitUntilExit()
            if let racer {
                kill(racer.processIdentifier, SIGCONT)
                racer.waitUntilExit()
            }
            if Int.random(in: 0..<3, using: &rng) == 0, let running = agent {
                _ = running.stop(SIGKILL)
                kills += 1
                agent = try AgentProcess(directory: dir)
            }
            let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed)), round \(round + 1)"
            crash.checkInvariants(playground, context: context)
            checkPayments(playground, context: context)
        }
        _ = agent?.stop(SIGKILL)

        // The storm ends: one pass takes what is left, the host applies everything.
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        #expect(try basketSync(["-C", dir, "apply"]).status == 0)
        #expect(try basketSync(["-C", dir, "sync"]).status == 0)
        crash.checkInvariants(playground, context: "seed \(seed), after the storm")
        checkPayments(playground, context: "seed \(seed), after the storm")
        let outbox = playground.records("outbox.jsonl")
        #expect(outbox.compactMap { $0["source"] as? String }.sorted() == (0..<delivered).map { "e\($0)" }.sorted(), "seed \(seed): every event exactly once")

        // The host cart is every delta applied exactly once, in seq order, clamped at 0.
        var expected: [String: Int] = ["X": 1]
        for record in outbox {
            for (id, quantity) in products(record) { expected[id] = max(0, expected[id, default: 0] + quantity) }
        }
        let cart = try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]
        let lines = Dictionary(uniqueKeysWithValues: (cart["products"] as! [[String: Any]]).map { ($0["id"] as! String, $0["quantity"] as! Int) })
        #expect(lines == expected.filter { $0.value > 0 }, "seed \(seed): the host cart is not every delta exactly once")
        #expect(cart["syncedThrough"] as? Int == outbox.count)

        // The database and the files agree.
        let status = try JSONSerialization.jsonObject(with: Data(try basketSync(["-C", dir, "status", "--json"]).stdout.utf8)) as! [String: Any]
        let records = status["records"] as! [String: Int]
        #expect(records["outbox"] == outbox.count)
        #expect(records["notifications"] == playground.records("notifications.jsonl").count)
        #expect(records["payments"] == playground.records("payments.jsonl").count)
        #expect((status["pending"] as! [Any]).isEmpty, "the host acknowledged everything")
        // The last notification is the Mealz part of the cart in place: no older cart came after it.
        let mealz = Set((status["mealz"] as! [[String: Any]]).map { $0["id"] as! String })
        let notified = products(playground.records("notifications.jsonl").last!)
        #expect(notified == lines.filter { mealz.contains($0.key) }, "seed \(seed): the last notification \(notified) is not the cart's Mealz part")
        print("storm: seed \(seed), \(rounds) rounds, \(kills) kills and \(stops) stopped racing passes survived, \(delivered) events and \(orders) orders checked")
    }
}

/// The checks that must hold at any instant in a sync directory (`folder` inside the playground:
/// a tree's cart), even right after a kill: every complete line a record, seq contiguous from 1,
/// no event twice in the outbox, every event acknowledged (moved to `inbox/cur/`) in it.
func checkCrashInvariants(_ playground: Playground, in folder: String = "", context: String) {
    let prefix = folder.isEmpty ? "" : folder + "/"
    // Acknowledged first, the outbox after: what was acknowledged then must be in it now.
    let acknowledged = playground.names(prefix + "inbox/cur")
    for file in ["outbox.jsonl", "notifications.jsonl"] {
        // One read: a running agent may append between two.
        let complete = playground.read(prefix + file).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        let records = complete.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(records.count == complete.count, "\(context): \(prefix)\(file) has a complete line that is not a record")
        let seqs = records.map { $0["seq"] as! Int }
        #expect(seqs == Array(1..<(seqs.count + 1)), "\(context): \(prefix)\(file) seqs skip or repeat: \(seqs.suffix(5))")
    }
    let sources = playground.records(prefix + "outbox.jsonl").compactMap { $0["source"] as? String }
    #expect(Set(sources).count == sources.count, "\(context): \(prefix)an event is in the outbox twice")
    let inOutbox = Set(sources)
    for name in acknowledged {
        let id = String(name.dropLast(".crash".count))
        #expect(inOutbox.contains(id), "\(context): \(prefix)\(id) was acknowledged (moved to cur/) but is not in the outbox")
    }
}
