import BasketSync
import Testing
import TestSupport

/// A host without `syncedThrough` (docs/spec.md §4 rule 5) over long histories: Mealz's batches
/// on a few SKUs (additions and removals), the host applying the next records in `seq` order —
/// none, one or several at once, in time or after their windows closed — and writing its whole
/// cart each time, windows closing between. The model is the rule's purpose, not its steps: the
/// host applies in `seq` order, so its cart holds the shopper's units plus those of the first
/// `applied` records, and Mealz's share must be exactly those records' units after every cart —
/// whichever run of batches the library takes the cart to show (runs that give the same cart give
/// the same units) — and the host's progress (where `apply` would start) never past what it
/// applied, nor below records it would then count twice. The shopper holds 10 of each SKU and never touches them (no clamping, nothing
/// of the shopper's to take for Mealz's) and the library sees his cart before any batch; a line
/// of his own changes, so that every cart is new.
@Suite struct LegacyHostHistoryTests {
    @Test func everyUnitALegacyHostAppliedInSeqOrderIsMealzsShareAfterEachCart() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let skus = ["A", "B", "C"]
        let rounds = Int(Knobs.value("BASKET_SYNC_HISTORIES", default: UInt64(300)))
        var carts = 0, lateOnes = 0, failed = false
        for round in 0..<rounds {
            var s = Transcript()
            var t = 0.0
            var batches: [[(String, Int)]] = []
            var applied = 0
            var own = 1
            var mealz: [String: Int] = [:]
            var log: [String] = []
            func write() throws -> [SyncEffect] {
                own += 1
                var lines = [RetailerProduct(id: "X", quantity: own)]
                for id in skus {
                    let units = batches.prefix(applied).reduce(10) { sum, batch in sum + batch.filter { $0.0 == id }.reduce(0) { $0 + $1.1 } }
                    lines.append(RetailerProduct(id: id, quantity: units))
                }
                return try s.cart(t, lines)
            }
            func check(_ effects: [SyncEffect]) {
                carts += 1
                lateOnes += effects.filter { if case .lateEcho = $0 { true } else { false } }.count
                var share: [ExactID: Int] = [:]
                for batch in batches.prefix(applied) { for (id, delta) in batch { share[ExactID(id), default: 0] += delta } }
                let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it), round \(round): \(log.joined(separator: "; "))"
                guard !failed else { return }  // the first failure of a history says it
                // Where `apply` would start (the host's progress): never past what the host
                // applied (it would skip those records), and what it would apply again of them
                // adds up to nothing on every line (it would count them twice).
                let progress = Int(s.machine.state.echoedThrough ?? 0)
                var again: [String: Int] = [:]
                for batch in batches.prefix(applied).dropFirst(min(progress, applied)) { for (id, delta) in batch { again[id, default: 0] += delta } }
                let progressRight = progress <= applied && again.values.allSatisfy { $0 == 0 }
                failed = s.confirmed.filter { $0.value != 0 } != share.filter { $0.value != 0 } || !progressRight
                #expect(s.confirmed.filter { $0.value != 0 } == share.filter { $0.value != 0 }, "\(context)")
                #expect(progressRight, "progress \(progress) after \(applied) applied: \(context)")
            }
            // The cart before any batch: what the shopper holds is known before Mealz adds to it.
            _ = try write()
            for _ in 0..<40 {
                let roll = rng.below(10)
                if roll < 4 {
                    let lines = mealzBatch(on: skus, mealz: &mealz, rng: &rng)
                    t += [0.1, 0.5, 2][rng.below(3)]
                    batches.append(lines)
                    _ = try s.delta(t, lines.map { RetailerProduct(id: $0.0, quantity: $0.1) })
                    log.append("t=\(t) #\(batches.count) \(lines)")
                } else if roll < 7 {
                    t += [0.1, 1, 4][rng.below(3)]
                    applied += rng.below(batches.count - applied + 1)
                    log.append("t=\(t) cart after #\(applied)")
                    check(try write())
                } else {
                    t += [1, 5, 11, 30][rng.below(4)]
                    let effects = s.tick(t)
                    log.append("t=\(t) tick (\(effects.filter { if case .rolledBack = $0 { true } else { false } }.count) rolled back)")
                }
            }
            // The host catches up, late: every unit Mealz pushed is its share.
            t += 30
            _ = s.tick(t)
            applied = batches.count
            log.append("t=\(t) cart after every record")
            check(try write())
            if failed { return }
        }
        // The histories must reach what the rule is about: windows closed, then shown late.
        #expect(carts > rounds * 5 && lateOnes > rounds / 2, "seed \(seed): \(carts) carts, \(lateOnes) late echoes")
    }
}
