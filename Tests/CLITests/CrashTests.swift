import Foundation
import Testing
import TestSupport

/// SIGKILL the agent at random instants while events and carts flow: nothing acknowledged is lost
/// or doubled, seq has no gap, and no JSON Lines file shows a torn line a reader could take.
@Suite struct CrashTests {
    /// Delivers a Mealz event the Maildir way, as the Mealz side does.
    func deliver(_ playground: Playground, id: String, sku: String) throws {
        let name = "\(id).crash"
        try playground.write("inbox/tmp/\(name)", "{\"id\":\"\(id)\",\"type\":\"basketDelta\",\"products\":[{\"id\":\"\(sku)\",\"quantity\":1}]}\n")
        try FileManager.default.moveItem(at: playground.url("inbox/tmp/\(name)"), to: playground.url("inbox/new/\(name)"))
    }

    /// The checks that must hold at any instant, even right after a kill.
    func checkInvariants(_ playground: Playground, context: String) {
        for file in ["outbox.jsonl", "notifications.jsonl"] {
            let text = playground.read(file)
            let complete = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
            let records = playground.records(file)
            #expect(records.count == complete.count, "\(context): \(file) has a complete line that is not a record")
            let seqs = records.map { $0["seq"] as! Int }
            #expect(seqs == Array(1..<(seqs.count + 1)), "\(context): \(file) seqs skip or repeat: \(seqs.suffix(5))")
        }
        let sources = playground.records("outbox.jsonl").compactMap { $0["source"] as? String }
        #expect(Set(sources).count == sources.count, "\(context): an event is in the outbox twice")
        let inOutbox = Set(sources)
        for name in playground.names("inbox/cur") {
            let id = String(name.dropLast(".crash".count))
            #expect(inOutbox.contains(id), "\(context): \(id) was acknowledged (moved to cur/) but is not in the outbox")
        }
    }

    @Test func killedAtRandomInstantsTheAgentLosesAndDoublesNothing() async throws {
        let environment = ProcessInfo.processInfo.environment
        let kills = environment["BASKET_SYNC_KILLS"].flatMap(Int.init) ?? 150
        let seed = environment["BASKET_SYNC_SEED"].flatMap(UInt64.init) ?? UInt64.random(in: 1...UInt64(UInt32.max))
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

