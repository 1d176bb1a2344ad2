import BasketSync
import Testing
import TestSupport

/// A host without `syncedThrough` (docs/spec.md §4 rules 5 and 7) over long histories: Mealz's
/// batches on a few SKUs (additions and removals), the host applying the next records in `seq`
/// order — none, one or several at once, in time or after their windows closed — and writing its
/// whole cart each time, windows closing between, payments closing the basket now and then. The
/// model is the rules' purpose, not their steps: the host applies in `seq` order, so its cart
/// holds the shopper's units plus those of the first `applied` records, and after every cart
/// Mealz's share must be the units of the records applied since the last payment — whichever
/// count of records the library takes the cart to show, of those that give the same cart — and
/// the host's progress (where `apply` would start) never past what it applied, nor below records
/// it would then count twice. The shopper holds 10 of each SKU and never touches them, the
/// library sees his cart before any batch, and a line of his own changes so that every cart is new.
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
            // The records the last recorded payment paid (the host had applied them): Mealz's share
            // in the new basket is what it applied after them.
            var paid = 0
            var own = 1
            var mealz: [String: Int] = [:]
            var log: [String] = []
            /// The Mealz SKUs' lines of the cart once the host applied the first `count` records.
            func lines(after count: Int) -> [String: Int] {
                Dictionary(uniqueKeysWithValues: skus.map { id in
                    (id, batches.prefix(count).reduce(10) { sum, batch in sum + batch.filter { $0.0 == id }.reduce(0) { $0 + $1.1 } })
                })
            }
            /// The counts of records after which the cart would be what it is now, from the last payment.
            func cartCounts() -> [Int] { (paid...batches.count).filter { lines(after: $0) == lines(after: applied) } }
            func write() throws -> [SyncEffect] {
                own += 1
                let mealzLines = lines(after: applied)
                return try s.cart(t, [RetailerProduct(id: "X", quantity: own)] + skus.map { RetailerProduct(id: $0, quantity: mealzLines[$0]!) })
            }
            func check(_ effects: [SyncEffect]) {
                carts += 1
                lateOnes += effects.filter { if case .lateEcho = $0 { true } else { false } }.count
                // Mealz's share of this basket after the first `count` records: in seq order, a
                // removal takes Mealz's units of this basket only, never below 0.
                func share(after count: Int) -> [ExactID: Int] {
                    var share: [ExactID: Int] = [:]
                    for batch in batches[paid..<count] { for (id, delta) in batch { share[ExactID(id)] = max(0, share[ExactID(id), default: 0] + delta) } }
                    return share.filter { $0.value != 0 }
                }
                // Without payments, every count the cart could be after gives the same share. After
                // one, a removal of a paid unit (a batch on its way when the basket closed) stops
                // at 0 in the share and not in the cart: the cart cannot tell the counts apart, so
                // the share of any of them is right (a later cart showing a change settles it).
                let shares = cartCounts().map(share(after:))
                let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it), round \(round): \(log.joined(separator: "; "))"
                guard !failed else { return }  // the first failure of a history says it
                // Where `apply` would start (the host's progress): never past what the host
                // applied (it would skip those records), and what it would apply again of them
                // adds up to nothing on every line (it would count them twice).
                let progress = Int(s.machine.state.echoedThrough ?? 0)
                var again: [String: Int] = [:]
                for batch in batches.prefix(applied).dropFirst(min(progress, applied)) { for (id, delta) in batch { again[id, default: 0] += delta } }
                let progressRight = progress <= applied && again.values.allSatisfy { $0 == 0 }
                let confirmed = s.confirmed.filter { $0.value != 0 }
                failed = !shares.contains(confirmed) || !progressRight
                #expect(shares.contains(confirmed), "share \(confirmed), applied \(share(after: applied)): \(context)")
                #expect(progressRight, "progress \(progress) after \(applied) applied: \(context)")
            }
            // The cart before any batch: what the shopper holds is known before Mealz adds to it.
            _ = try write()
            _ = s.machine.setSelectedStore(externalId: "st", mode: .retailer, at: at(t))
            for _ in 0..<40 {
                let roll = rng.below(11)
                if roll == 10, cartCounts() == [applied] {
                    // The shopper pays the cart the host wrote last (taken first, as handle-payment
                    // takes it), when it tells how far the host got: what it showed applied is paid;
                    // the rest carries into the new basket, where Mealz's own count starts from what
                    // is on its way.
                    t += 0.5
                    check(try write())
                    let bought = skus.map { RetailerProduct(id: $0, quantity: 1) }
                    _ = try s.machine.handlePayment(totalPrice: Money("1")!, productList: bought, orderId: "o\(t)", at: at(t))
                    paid = applied
                    mealz = [:]
                    for batch in batches[applied...] { for (id, delta) in batch { mealz[id] = max(0, mealz[id, default: 0] + delta) } }
                    log.append("t=\(t) paid after #\(applied)")
                } else if roll < 4 {
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
