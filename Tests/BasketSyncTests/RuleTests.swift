import BasketSync
import Testing
import TestSupport

/// Each rule of docs/spec.md §4, and the cases that broke real Mealz SDKs, as short transcripts.
@Suite struct RuleTests {
    /// Two equal batches rolled back: a cart that shows one of them applied echoes the first only
    /// (each batch is judged on the cart after the earlier ones the host applied); the second is
    /// echoed when a cart shows it too.
    @Test func twoEqualRolledBackBatchesAreNotBothEchoedByACartThatShowsOne() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", 1)))
        _ = s.tick(20)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1, 2])
        let first = try s.cart(21, lines(("X", 1), ("A", 1)))
        #expect(first.contains(.lateEcho(seq: 1)) && !first.contains(.lateEcho(seq: 2)), "\(first)")
        #expect(s.machine.state.rolledBack.map(\.seq) == [2])
        let second = try s.cart(22, lines(("X", 1), ("A", 2)))
        #expect(second.contains(.lateEcho(seq: 2)), "\(second)")
        #expect(s.confirmed == ["A": 2])
    }

    /// A cart is judged when it was written: one written inside a batch's window echoes it in
    /// time however late it is taken (a cron pass, an agent stopped a while) — settled, no
    /// rollback, no late echo; one written after the window is a late echo, as ever. Seeded:
    /// windows, write and take times on both sides of the deadline.
    @Test func aCartWrittenInsideTheWindowEchoesInTimeHoweverLateItIsTaken() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for round in 0..<400 {
            let window = Double(Int.random(in: 1...20, using: &rng))
            var s = Transcript(window: .seconds(window))
            _ = try s.cart(0, lines(("X", 1)))
            _ = try s.delta(1, lines(("A", 2)))
            let written = 1 + Double.random(in: 0...(2 * window), using: &rng)
            let taken = written + Double.random(in: 0...(2 * window), using: &rng)
            let effects = try s.cart(taken, lines(("X", 1), ("A", 2)), writtenAt: written)
            let inTime = written < 1 + window
            let rolledBack = effects.contains { if case .rolledBack = $0 { true } else { false } }
            #expect(rolledBack == (!inTime && taken >= 1 + window), "seed \(seed), round \(round): window \(window), written \(written), taken \(taken): \(effects)")
            #expect(effects.contains(.lateEcho(seq: 1)) == !inTime, "seed \(seed), round \(round): \(effects)")
            #expect(effects.contains(.settled(seq: 1)) == inTime, "seed \(seed), round \(round): \(effects)")
            #expect(s.confirmed == ["A": 2] && s.pendingSeqs.isEmpty, "seed \(seed), round \(round)")
        }
    }

    /// The rolled-back batches remembered for a late echo are bounded by their lines together
    /// (100,000 by default), the oldest going first and the newest kept whatever its size: a
    /// backlog of huge basket states no longer keeps 32 of them in the state (and in memory).
    @Test func rolledBackBatchesAreBoundedByTheirLines() throws {
        var s = Transcript()
        _ = try s.cart(0, [])
        let big = (0..<60_000).map { RetailerProduct(id: "s\($0)", quantity: 1) }
        for index in 1...4 { _ = try s.delta(Double(index), big) }
        _ = s.tick(30)
        #expect(s.machine.state.rolledBack.map(\.seq) == [4], "the newest only: two would hold 120,000 lines")
        _ = try s.delta(31, lines(("A", 1)))
        _ = s.tick(60)
        #expect(s.machine.state.rolledBack.map(\.seq) == [4, 5])
        #expect(s.machine.state.rolledBack.reduce(0) { $0 + $1.products.count } <= 100_000 + 1)
    }

    /// A Mealz increase that would take the host cart's line past maxQuantity — the cart as last
    /// taken, with the batches pending on their way — is recorded cut so that the line lands at
    /// the limit, and reported; cut to nothing, it is left out; a decrease is never cut.
    @Test func anIncreasePastMaxQuantityIsRecordedCutAtTheLimit() throws {
        var s = Transcript(maxQuantity: 10)
        _ = try s.cart(0, lines(("X", 1), ("A", 7)), syncedThrough: 0)
        let first = try s.delta(1, lines(("A", 2), ("B", 12)))
        #expect(first.contains(.clampedAtLimit(id: "B", asked: 12, recorded: 10, limit: 10)), "\(first)")
        #expect(s.machine.state.pending.last?.products == lines(("A", 2), ("B", 10)))
        // A at 7 + 2 pending: +3 would be 12.
        let second = try s.delta(2, lines(("A", 3), ("C", 1)))
        #expect(second.contains(.clampedAtLimit(id: "A", asked: 3, recorded: 1, limit: 10)), "\(second)")
        #expect(s.machine.state.pending.last?.products == lines(("A", 1), ("C", 1)))
        // A is at the limit with what is on its way: nothing for it; the batch made of it alone is none.
        let third = try s.delta(3, lines(("A", 5)))
        #expect(third == [.clampedAtLimit(id: "A", asked: 5, recorded: 0, limit: 10)], "\(third)")
        #expect(s.pendingSeqs == [1, 2])
        // Decreases are kept whole.
        let fourth = try s.delta(4, lines(("A", -20), ("C", 1)))
        #expect(s.machine.state.pending.last?.products == lines(("A", -20), ("C", 1)), "\(fourth)")
        #expect(!fourth.contains { if case .clampedAtLimit = $0 { true } else { false } })
    }

    /// A cart that shows a rolled-back batch and the pending one after it applied together (a
    /// host without `syncedThrough` applying several records at once, in seq order) confirms
    /// both: the first late, the second settled — Mealz's share holds every unit.
    @Test func aRolledBackBatchAndAPendingOneShownTogetherAreBothConfirmed() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = s.tick(20)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1])
        _ = try s.delta(21, lines(("A", 2)))
        let both = try s.cart(22, lines(("X", 1), ("A", 3)))
        #expect(both.contains(.lateEcho(seq: 1)) && both.contains(.settled(seq: 2)), "\(both)")
        #expect(s.confirmed == ["A": 3])
        #expect(s.pendingSeqs.isEmpty && s.machine.state.rolledBack.isEmpty)
    }

    /// Whatever prefix of the rolled-back and pending batches (in seq order) a host applied, the
    /// cart that shows it confirms exactly those: the rolled-back ones late, the pending ones
    /// settled, the share their sum. Seeded; the deltas chosen so that each cart can show one
    /// prefix only (rolled-back 1–9, at most 5; pending in hundreds).
    @Test func anyPrefixOfRolledBackThenPendingBatchesShownIsConfirmedExactly() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        for round in 0..<200 {
            var s = Transcript()
            _ = try s.cart(0, lines(("X", 1)))
            let rolled = (0..<(1 + rng.below(5))).map { _ in 1 + rng.below(9) }
            let pending = (0..<(1 + rng.below(4))).map { _ in 100 * (1 + rng.below(9)) }
            for (index, delta) in rolled.enumerated() { _ = try s.delta(1 + Double(index), lines(("A", delta))) }
            _ = s.tick(20)
            for (index, delta) in pending.enumerated() { _ = try s.delta(21 + Double(index), lines(("A", delta))) }
            let all = rolled + pending
            let applied = 1 + rng.below(all.count)
            let total = all.prefix(applied).reduce(0, +)
            let effects = try s.cart(30, lines(("X", 1), ("A", total)))
            let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it), round \(round): rolled back \(rolled), pending \(pending), applied \(applied): \(effects)"
            let late = effects.compactMap { if case let .lateEcho(seq) = $0 { seq } else { nil } }
            let settled = effects.compactMap { if case let .settled(seq) = $0 { seq } else { nil } }
            #expect(late.sorted() == (0..<min(applied, rolled.count)).map { UInt64($0 + 1) }, "\(context)")
            #expect(settled.sorted() == (rolled.count..<max(applied, rolled.count)).map { UInt64($0 + 1) }, "\(context)")
            #expect(s.confirmed == ["A": total], "\(context)")
        }
    }

    /// Whatever run of rolled-back and pending batches on several SKUs (one line of a batch
    /// netted out by a later batch included) a host applied in seq order, a cart that can show
    /// that run only confirms it: every batch of it settled or confirmed late, Mealz's share the
    /// sum of its deltas. Seeded; the rounds where another run would show the same cart are not
    /// judged (at least 100 of 400 are).
    @Test func aRunOfBatchesOnSeveralSkusShownInSeqOrderIsConfirmedWhole() throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let skus = ["A", "B", "C"]
        var judged = 0
        for round in 0..<400 {
            var s = Transcript()
            let start = Dictionary(uniqueKeysWithValues: skus.map { ($0, 10) })
            _ = try s.cart(0, skus.map { RetailerProduct(id: $0, quantity: 10) })
            var mealz: [String: Int] = [:]
            func batch() -> [(String, Int)] { mealzBatch(on: skus, mealz: &mealz, rng: &rng) }
            var all: [[(String, Int)]] = []
            let rolledCount = 1 + rng.below(3)
            for index in 0..<rolledCount {
                let lines = batch()
                all.append(lines)
                _ = try s.delta(1 + Double(index), lines.map { RetailerProduct(id: $0.0, quantity: $0.1) })
            }
            _ = s.tick(20)
            for index in 0..<(1 + rng.below(3)) {
                let lines = batch()
                all.append(lines)
                _ = try s.delta(21 + Double(index), lines.map { RetailerProduct(id: $0.0, quantity: $0.1) })
            }
            func cart(after count: Int) -> [String: Int] {
                var cart = start
                for lines in all.prefix(count) { for (id, delta) in lines { cart[id] = max(0, cart[id]! + delta) } }
                return cart
            }
            let applied = 1 + rng.below(all.count)
            let shown = cart(after: applied)
            guard (0...all.count).filter({ cart(after: $0) == shown }) == [applied] else {
                _ = try s.cart(30, skus.map { RetailerProduct(id: $0, quantity: shown[$0]!) })
                continue
            }
            judged += 1
            let effects = try s.cart(30, skus.map { RetailerProduct(id: $0, quantity: shown[$0]!) })
            let context = "seed \(seed) (BASKET_SYNC_SEED=\(seed) replays it), round \(round): batches \(all), \(rolledCount) rolled back, applied \(applied): \(effects)"
            var share: [ExactID: Int] = [:]
            for lines in all.prefix(applied) { for (id, delta) in lines { share[ExactID(id), default: 0] += delta } }
            #expect(s.confirmed == share.filter { $0.value > 0 }, "\(context)")
            let prefix = Set((1...applied).map { UInt64($0) })
            #expect(prefix.isDisjoint(with: s.pendingSeqs) && prefix.isDisjoint(with: s.machine.state.rolledBack.map(\.seq)), "\(context)")
        }
        #expect(judged >= 100, "seed \(seed): only \(judged) rounds could be judged")
    }

    /// Pending batches that net out on a line the shopper holds (−1 then +1, or +1 then −1) are
    /// not shown by a cart that holds what it held, when one of them changed another line the
    /// cart does not show: the host applies in seq order, so none of them was applied. The
    /// shopper's unit never becomes Mealz's.
    @Test(arguments: [false, true])
    func batchesNettingOutOnAShoppersLineAreNotShownWithoutTheOthersBeforeThem(mirrored: Bool) throws {
        var s = Transcript()
        let (held, other) = mirrored ? ("C", "B") : ("B", "C")
        _ = try s.cart(0, lines(("X", 1), (held, 1)))
        if mirrored {
            _ = try s.delta(1, lines((held, 1)))
            _ = try s.delta(2, lines((held, -1), (other, 1)))
        } else {
            _ = try s.delta(1, lines((held, -1), (other, 1)))
            _ = try s.delta(2, lines((held, 1)))
        }
        let effects = try s.cart(3, lines(("X", 2), (held, 1)))
        let settled = effects.compactMap { if case let .settled(seq) = $0 { seq } else { nil } }
        #expect(settled.isEmpty, "only \"nothing applied\" explains the cart: \(effects)")
        _ = s.tick(20)
        #expect(s.confirmed.isEmpty, "the shopper's unit is not Mealz's: \(s.confirmed)")
    }

    /// A batch a cart could show only by holding what it held (a removal on a line at 0) is no
    /// evidence the host applied it: not settled by that cart, and the rolled-back batches below
    /// it are not put behind the host — a later cart showing one applied confirms it late.
    @Test func aBatchShownOnlyByAnUnchangedLineBuriesNoRolledBackBatch() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("B", 1)))
        _ = s.tick(20)
        _ = try s.delta(21, lines(("A", -1)))
        let unchanged = try s.cart(22, lines(("X", 2)))
        #expect(!unchanged.contains { if case .settled = $0 { true } else { false } }, "\(unchanged)")
        let applied = try s.cart(23, lines(("X", 2), ("B", 1)))
        #expect(applied.contains(.lateEcho(seq: 1)), "\(applied)")
        #expect(s.confirmed == ["B": 1])
    }

    /// A new window length applies to the batches sent from then on: a window already open keeps
    /// the deadline it was given (a SIGHUP changing `pendingTimeoutSeconds`).
    @Test func aNewWindowLengthLeavesTheOpenWindowsAsTheyWere() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        s.machine.configuration.pendingTimeout = .seconds(100)
        _ = try s.delta(2, lines(("B", 1)))
        #expect(s.machine.state.pending.map { $0.deadline!.timeIntervalSince($0.at) } == [10, 100])
        _ = s.tick(12)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1] && s.pendingSeqs == [2])
        _ = s.tick(101)
        #expect(s.pendingSeqs == [2], "its window lasts its 100 s")
        _ = s.tick(103)
        #expect(s.pendingSeqs.isEmpty)
    }

    /// Batches rolled back on one SKU are confirmed late together by a cart that shows them all,
    /// not only the last batch of each SKU.
    @Test func rolledBackBatchesOnOneSkuAreConfirmedTogetherByACartThatShowsThemAll() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", 1)))
        _ = try s.delta(3, lines(("B", 1)))
        _ = s.tick(20)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1, 2, 3])
        let late = try s.cart(21, lines(("X", 1), ("A", 2), ("B", 1)))
        #expect([1, 2, 3].allSatisfy { late.contains(.lateEcho(seq: $0)) }, "\(late)")
        #expect(s.machine.state.rolledBack.isEmpty)
        #expect(s.confirmed == ["A": 2, "B": 1])
    }

    /// A cart that holds what it held before the batches shows none of them, even when they add
    /// up to nothing (+1 then −1).
    @Test func batchesThatAddUpToNothingAreNotShownByAnUnchangedCart() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1), ("A", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", -1)))
        _ = s.tick(20)
        let same = try s.cart(21, lines(("X", 2), ("A", 1)))
        #expect(!same.contains(.lateEcho(seq: 1)) && !same.contains(.lateEcho(seq: 2)), "\(same)")
    }

    @Test func oneSkuPushedByTwoRecipesThenOneRecipeRemoved() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        #expect(try s.delta(1, lines(("pasta", 1)), source: "recipe-1") == [update(1, 1, lines(("pasta", 1)), source: "recipe-1")])
        #expect(try s.delta(2, lines(("pasta", 1)), source: "recipe-2") == [update(2, 2, lines(("pasta", 1)), source: "recipe-2")])
        _ = try s.cart(3, lines(("pasta", 2)), syncedThrough: 2)
        // Removing recipe 1 removes its unit only; an absolute model would have set pasta to 0.
        #expect(try s.delta(4, lines(("pasta", -1)), source: "recipe-1-removed") == [update(3, 4, lines(("pasta", -1)), source: "recipe-1-removed")])
        #expect(try s.cart(5, lines(("pasta", 1)), syncedThrough: 3)
            == [.settled(seq: 3), notify(3, 5, lines(("pasta", 1)), syncedThrough: 3)])
        #expect(s.view == ["pasta": 1])
    }

    @Test func replaceOfOneSkuInOneBatchSendsNothing() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("A", 1)), syncedThrough: 0)
        // Remove + add of the same SKU nets to 0: the line is dropped, the empty batch not sent.
        #expect(try s.delta(1, lines(("A", -1), ("A", 1))) == [])
        #expect(s.machine.state.lastOutboxSeq == 0)
    }

    @Test func replaceOfOneProductByAnotherIsOneBatch() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2)))
        _ = try s.cart(2, lines(("A", 2)), syncedThrough: 1)
        #expect(try s.delta(3, lines(("A", -2), ("B", 2))) == [update(2, 3, lines(("A", -2), ("B", 2)))])
        #expect(s.view == ["B": 2])
    }

    @Test func quantityZeroLinesAreNeverSent() throws {
        var s = Transcript()
        #expect(try s.delta(0, lines(("A", 0), ("B", 0))) == [])
        #expect(try s.delta(1, lines(("A", 0), ("B", 2), ("C", 0))) == [update(1, 1, lines(("B", 2))), .armTimer(at: at(11))])
        // A basketState equal to the view has nothing to send.
        #expect(try s.state(2, lines(("B", 2))) == [])
        #expect(s.machine.state.lastOutboxSeq == 1)
    }

    @Test func basketStateOfASlowHostNeverSendsUnitsTwice() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        #expect(try s.state(1, lines(("A", 2))) == [update(1, 1, lines(("A", 2)))])
        // The host has not applied #1 yet; the WebView says the same again, then more.
        #expect(try s.state(2, lines(("A", 2))) == [])
        #expect(try s.state(3, lines(("A", 3))) == [update(2, 3, lines(("A", 1)))])
        // A SKU missing from the state goes to 0.
        #expect(try s.state(4, lines(("B", 1))) == [update(3, 4, lines(("B", 1), ("A", -3)))])
        _ = try s.cart(5, lines(("B", 1)), syncedThrough: 3)
        #expect(s.view == ["B": 1])
        #expect(s.confirmed == ["B": 1])
    }

    @Test func deltasThatWouldTakeAHostLineBelowZeroAreClampedAsTheHostDoes() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 1)))
        #expect(try s.delta(2, lines(("A", -3))) == [update(2, 2, lines(("A", -3)))])
        #expect(try s.delta(3, lines(("A", 2))) == [update(3, 3, lines(("A", 2)))])
        // The host clamps at 0 before adding 2: the view says 2, not 0 (1 − 3 + 2).
        #expect(s.view == ["A": 2])
        _ = try s.cart(4, lines(("A", 2)), syncedThrough: 3)
        #expect(s.confirmed == ["A": 2])
    }

    @Test func aHostThatRejectsADeltaAcknowledgesItWithoutApplyingIt() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)), syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2), ("B", 1)))
        // Out of stock for A: the host applies B only, and says it processed #1.
        #expect(try s.cart(2, lines(("X", 1), ("B", 1)), syncedThrough: 1)
            == [.settled(seq: 1), notify(2, 2, lines(("B", 1)), syncedThrough: 1)])
        #expect(s.view == ["B": 1])
        #expect(s.machine.mealzRelatedIds == ["B"])
    }

    @Test func changesToNonMealzLinesOnlyAreNotNotified() throws {
        var s = Transcript()
        #expect(try s.cart(0, lines(("X", 1)), syncedThrough: 0) == [notify(1, 0, [], syncedThrough: 0)])
        #expect(try s.cart(1, lines(("X", 2), ("Y", 1)), syncedThrough: 0) == [])
        _ = try s.delta(2, lines(("A", 1)))
        #expect(try s.cart(3, lines(("A", 1), ("X", 2), ("Y", 1)), syncedThrough: 1)
            == [.settled(seq: 1), notify(2, 3, lines(("A", 1)), syncedThrough: 1)])
        #expect(try s.cart(4, lines(("Y", 7), ("A", 1)), syncedThrough: 1) == [], "reordered lines are the same list")
    }

    @Test func theFirstCartIsAlwaysNotified() throws {
        var s = Transcript()
        #expect(try s.cart(0, []) == [notify(1, 0, [])])
        #expect(try s.cart(1, []) == [])
    }

    @Test func theSameIdTwiceInACartAddsUp() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 3)))
        #expect(try s.cart(2, lines(("A", 1), ("X", 1), ("A", 2)), syncedThrough: 1)
            == [.settled(seq: 1), notify(2, 2, lines(("A", 3)), syncedThrough: 1)])
    }

    @Test func withoutASynchronizerDeltasAreIgnoredButCounted() throws {
        var s = Transcript(registered: false)
        let batch = lines(("A", 2))
        #expect(try s.delta(0, batch, source: "evt-1") == [.ignored(IgnoredBatch(source: "evt-1", products: batch))])
        #expect(try s.state(1, lines(("B", 1)), source: "evt-2") == [.ignored(IgnoredBatch(source: "evt-2", products: lines(("B", 1))))])
        #expect(s.machine.state.counters.ignored == 2)
        #expect(s.machine.state.lastOutboxSeq == 0)
        #expect(s.view == [:])
        // Registering later does not replay what was ignored.
        s.machine.isSynchronizerRegistered = true
        #expect(try s.delta(2, lines(("C", 1))) == [update(1, 2, lines(("C", 1))), .armTimer(at: at(12))])
    }

    @Test func redirectToCartTakesTheNextOutboxSeq() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        #expect(try s.machine.receive(.redirectToCart, source: "evt-45", at: at(1))
            == [.outbox(OutboxRecord(seq: 2, id: "s-2", type: .redirectToCart, at: at(1), source: "evt-45"))])
        #expect(try s.delta(2, lines(("A", 1))).first == update(3, 2, lines(("A", 1))))
    }

    @Test func aTransferLandsOnceThroughDeltas() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        let basket = lines(("A", 2), ("B", 1))
        #expect(try s.machine.receive(.basketTransfer(basket, transferId: "t-9"), source: "evt-44", at: at(1))
            == [update(1, 1, basket, source: "evt-44", transferId: "t-9")])
        #expect(try s.machine.receive(.basketTransfer(basket, transferId: "t-9"), source: "evt-46", at: at(2))
            == [.duplicateTransfer(transferId: "t-9")])
        #expect(s.view == ["A": 2, "B": 1])
    }

    /// docs/spec.md §4 rule 4: a claim beyond the outbox acknowledges nothing, not even up to the
    /// last seq; it is reported, and the batch waits for a cart that acknowledges it within.
    @Test func acknowledgementBeyondTheOutboxIsReportedAndAcknowledgesNothing() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        #expect(try s.cart(1, lines(("A", 1)), syncedThrough: 17) == [
            .acknowledgementBeyondOutbox(syncedThrough: 17, lastSeq: 1),
            notify(1, 1, lines(("A", 1)), syncedThrough: 0), .disarmTimer,
        ])
        #expect(s.pendingSeqs == [1])
        #expect(try s.cart(2, lines(("A", 1), ("X", 1)), syncedThrough: 1) == [.settled(seq: 1), notify(2, 2, lines(("A", 1)), syncedThrough: 1)])
    }

    /// docs/spec.md §4 rule 4, by causality: a cart version already on disk when record N was
    /// committed acknowledges at most N − 1; one that claims N or more claims a record it could
    /// not have seen and acknowledges nothing (reported).
    @Test func aCartAcknowledgesOnlyTheRecordsThatExistedWhenItWasWritten() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("B", 1)))
        // Written while only #1 existed, read after #2 was made.
        #expect(try s.cart(2, lines(("A", 1)), syncedThrough: 2, writtenWhenLastSeqWas: 1) == [
            .acknowledgementBeforeRecords(syncedThrough: 2, writtenThrough: 1),
            notify(1, 2, lines(("A", 1)), syncedThrough: 0), .disarmTimer,
        ])
        #expect(s.pendingSeqs == [1, 2])
        // A claim within what existed acknowledges it.
        #expect(try s.cart(2.5, lines(("A", 1)), syncedThrough: 1, writtenWhenLastSeqWas: 1).contains(.settled(seq: 1)))
        // An honest claim is never refused for its value: a cart written since says the same 2.
        #expect(try s.cart(3, lines(("A", 1), ("B", 1)), syncedThrough: 2).contains(.settled(seq: 2)))
        #expect(s.pendingSeqs.isEmpty)
    }

    @Test func aHostThatStartsAcknowledgingClosesItsOpenWindows() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("B", 1)))
        #expect(try s.cart(2, lines(("A", 1)), syncedThrough: 1)
            == [.settled(seq: 1), notify(1, 2, lines(("A", 1)), syncedThrough: 1), .disarmTimer])
        #expect(s.tick(100) == [], "#2 waits for the acknowledgement, however long")
        #expect(s.pendingSeqs == [2])
    }

    @Test func withoutSyncedThroughEchoesSettleInSeqOrder() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", 1)))
        _ = try s.delta(3, lines(("B", 1)))
        // Both A batches applied in one cart, B not yet: #1 and #2 settle, #3 waits.
        #expect(try s.cart(4, lines(("A", 3)))
            == [.settled(seq: 1), .settled(seq: 2), notify(2, 4, lines(("A", 3))), .armTimer(at: at(13))])
        #expect(s.pendingSeqs == [3])
        #expect(try s.cart(5, lines(("A", 3), ("B", 1)))
            == [.settled(seq: 3), notify(3, 5, lines(("A", 3), ("B", 1))), .disarmTimer])
        #expect(s.confirmed == ["A": 2, "B": 1], "the unit of A that was in the cart first is not Mealz's")
    }

    @Test func aShopperRemovingAMealzProductRemovesItFromMealz() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2), ("B", 1)))
        _ = try s.cart(2, lines(("A", 2), ("B", 1)), syncedThrough: 1)
        #expect(try s.cart(3, lines(("A", 2)), syncedThrough: 1) == [notify(3, 3, lines(("A", 2)), syncedThrough: 1)])
        #expect(s.view == ["A": 2])
        // The WebView, now in line, asks for B again: one unit, not two.
        #expect(try s.state(4, lines(("A", 2), ("B", 1))) == [update(2, 4, lines(("B", 1)))])
    }

    @Test func invalidInputIsRefusedAndChangesNothing() throws {
        var s = Transcript()
        let before = s.machine.state
        #expect(throws: SyncInputError.emptyProductId) { try s.delta(0, lines(("", 1))) }
        #expect(throws: SyncInputError.negativeQuantity(id: "A", quantity: -1)) { try s.cart(0, lines(("A", -1))) }
        #expect(throws: SyncInputError.negativeQuantity(id: "A", quantity: -2)) { try s.state(0, lines(("A", -2))) }
        #expect(s.machine.state == before)
    }

    /// Sums past `Int`'s range are refused by name — a Mealz delta, a cart — never held at the
    /// bound as if they were a quantity; a `maxQuantity` of `Int.max` is taken as the largest one
    /// (2^53 − 1), where an increase is cut as at any limit. No trap anywhere.
    @Test func overflowingQuantitiesAreRefusedNeverHeldAtTheBound() throws {
        var s = Transcript(maxQuantity: Int.max)
        #expect(s.machine.configuration.maxQuantity == SyncConfiguration.largestMaxQuantity)
        _ = try s.cart(0, [], syncedThrough: 0)
        #expect(throws: SyncInputError.quantitiesOverflow(id: "A")) { _ = try s.delta(1, lines(("A", Int.max), ("A", Int.max))) }
        #expect(s.view == [:] && s.pendingSeqs.isEmpty, "nothing done")
        _ = try s.delta(2, lines(("A", Int.max)))
        #expect(s.view == ["A": SyncConfiguration.largestMaxQuantity], "cut at the limit")
        #expect(throws: SyncInputError.quantitiesOverflow(id: "A")) { _ = try s.cart(3, lines(("A", Int.max), ("A", 5)), syncedThrough: 1) }
        #expect(try s.cart(4, lines(("A", SyncConfiguration.largestMaxQuantity)), syncedThrough: 1).contains(.settled(seq: 1)))
    }

    @Test func aRestartThroughTheCodableStateLosesAndRepeatsNothing() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        _ = try s.cart(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("A", 1)))
        let before = s.machine.state
        try s.restart()
        #expect(s.machine.state == before)
        #expect(try s.delta(3, lines(("B", 1))) == [update(3, 3, lines(("B", 1)))])
        #expect(s.tick(12) == [
            .rolledBack(PendingBatch(seq: 2, products: lines(("A", 1)), at: at(2), deadline: at(12))),
            .armTimer(at: at(13)),
        ])
    }

    /// docs/spec.md §4 rule 5: a batch is echoed only when the cart shows every line it changed;
    /// a later batch shown does not settle an earlier one the cart does not show (the host
    /// applied B, not A: A's 1 is the shopper's own), and apply still applies the earlier one.
    @Test func aLaterEchoDoesNotSettleAnEarlierBatchTheCartDoesNotShow() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("B", 1)))
        let effects = try s.cart(3, lines(("A", 1), ("B", 1)))
        #expect(effects.contains(.settled(seq: 2)) && !effects.contains(.settled(seq: 1)), "\(effects)")
        #expect(s.pendingSeqs == [1])
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 0, "apply still applies #1")
        // A applied later: #1 settles too, and the host's progress reaches #2.
        #expect(try s.cart(4, lines(("A", 2), ("B", 1))).contains(.settled(seq: 1)))
        #expect(s.pendingSeqs.isEmpty)
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 2)
    }

    /// docs/spec.md §4, the share: a Mealz removal takes Mealz's units first, never below 0; the
    /// shopper's own units on the line stay the shopper's, and a line Mealz no longer holds any
    /// of leaves the Mealz-related list.
    @Test func aMealzRemovalTakesMealzUnitsFirst() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2), ("B", 3)))
        _ = try s.cart(2, lines(("A", 5), ("B", 3)), syncedThrough: 1)
        #expect(s.confirmed == ["A": 2, "B": 3])
        _ = try s.delta(3, lines(("A", -2), ("B", -1)))
        #expect(try s.cart(4, lines(("A", 3), ("B", 2)), syncedThrough: 2) == [
            .settled(seq: 2), notify(3, 4, lines(("B", 2)), syncedThrough: 2),
        ])
        #expect(s.confirmed == ["B": 2], "A's 3 are the shopper's; B's 2 Mealz's")
        // A removal larger than Mealz's share stops at 0.
        _ = try s.delta(5, lines(("B", -3)))
        _ = try s.cart(6, lines(("A", 3)), syncedThrough: 3)
        #expect(s.confirmed.isEmpty)
    }

    /// docs/spec.md §4 rule 5: the host applies in seq order, so once a cart showed batch #2, the
    /// rolled-back #1 is behind it (skipped): the shopper later adding the same unit by hand is
    /// the shopper's, not a late echo of #1.
    @Test func aBatchBelowOneACartShowedNeverComesLate() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = s.tick(12)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1])
        _ = try s.delta(13, lines(("B", 1)))
        #expect(try s.cart(14, lines(("X", 1), ("B", 1))).contains(.settled(seq: 2)))
        let shopper = try s.cart(15, lines(("X", 1), ("B", 1), ("A", 1)))
        #expect(!shopper.contains(.lateEcho(seq: 1)), "\(shopper)")
        #expect(s.confirmed == ["B": 1])
    }

    /// The same when the later batch was shown late: once a cart confirmed #2 late, the
    /// rolled-back #1 is behind the host too.
    @Test func aBatchBelowOneConfirmedLateNeverComesLate() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("B", 1)))
        _ = s.tick(13)
        #expect(s.machine.state.rolledBack.map(\.seq) == [1, 2])
        #expect(try s.cart(14, lines(("X", 1), ("B", 1))).contains(.lateEcho(seq: 2)))
        let shopper = try s.cart(15, lines(("X", 1), ("B", 1), ("A", 1)))
        #expect(!shopper.contains(.lateEcho(seq: 1)), "\(shopper)")
        #expect(s.confirmed == ["B": 1])
    }

    /// docs/spec.md §4 rule 4: a cart of an acknowledging host whose claim is refused (its counter
    /// ran ahead) still shows what the host applied: the pending batch it shows is counted in
    /// the WebView's basis once, not twice, and settles (without being taken again from the
    /// share) when an honest claim comes.
    @Test func aCartWhoseClaimIsRefusedIsNotCountedTwiceInTheBasis() throws {
        var s = Transcript()
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 3)))
        _ = try s.cart(2, lines(("A", 3)), syncedThrough: 1)
        _ = try s.delta(3, lines(("A", -1)))
        _ = try s.delta(4, lines(("B", 2)))
        // The host applied #2 and #3, and claims 9: refused, nothing settles.
        let refused = try s.cart(5, lines(("A", 2), ("B", 2)), syncedThrough: 9)
        #expect(!refused.contains(.settled(seq: 2)) && s.pendingSeqs == [2, 3])
        #expect(s.view == ["A": 2, "B": 2], "the basis counts the batches the cart shows once")
        #expect(try s.state(6, lines(("A", 2), ("B", 2))) == [], "the WebView repeating what it was told pushes nothing")
        // The honest claim settles both; A's removal came off the share once.
        _ = try s.cart(7, lines(("A", 2), ("B", 2)), syncedThrough: 3)
        #expect(s.pendingSeqs.isEmpty)
        #expect(s.confirmed == ["A": 2, "B": 2])
        #expect(s.view == ["A": 2, "B": 2])
    }

    /// docs/spec.md §4 rule 7: a payment pays the cart it takes; the pending batches that cart
    /// showed applied (a refused claim) are paid with it and do not carry into the new basket.
    @Test func aPaymentPaysThePendingBatchesItsCartShowed() throws {
        var s = Transcript()
        _ = s.machine.setSelectedStore(externalId: "st", mode: .retailer, at: at(0))
        _ = try s.cart(0, [], syncedThrough: 0)
        _ = try s.delta(1, lines(("A", 2)))
        _ = try s.cart(2, lines(("A", 2)), syncedThrough: 1)
        _ = try s.delta(3, lines(("B", 1)))
        _ = try s.delta(4, lines(("C", 1)))
        // The host applied #2, not #3, and claims 9: refused.
        _ = try s.cart(5, lines(("A", 2), ("B", 1)), syncedThrough: 9)
        let paid = try s.machine.handlePayment(totalPrice: Money("5")!, productList: lines(("A", 2), ("B", 1)), orderId: "o", at: at(6))
        #expect(paid.contains(notify(4, 6, lines(("C", 1)), syncedThrough: 1, basket: 2)), "\(paid)")
        let mealz = paid.compactMap { effect -> [RetailerProduct]? in if case let .payment(record) = effect { record.mealzProducts } else { nil } }
        #expect(mealz == [lines(("A", 2), ("B", 1))], "the payment counts B, which the cart it pays showed applied")
        #expect(s.view == ["C": 1], "#2 was paid with the cart; #3 carries into the new basket")
        // The completion emptied the cart; the host applies #3 and acknowledges both.
        _ = try s.cart(7, lines(("C", 1)), syncedThrough: 3)
        #expect(s.pendingSeqs.isEmpty)
        #expect(s.confirmed == ["C": 1], "B was paid: not in the new basket's share")
    }

    /// docs/spec.md §4 rules 4, 5 and 7: a batch rolled back before a payment, applied after it,
    /// is the new basket's share — acknowledged (a late acknowledgement) or echoed (a late echo)
    /// — as the pending batches on their way carry into it; no cart had shown it, so the payment
    /// did not pay it.
    @Test(arguments: [false, true])
    func aBatchRolledBackBeforeAPaymentAndAppliedAfterItIsTheNewBasketsShare(acknowledged: Bool) throws {
        var s = Transcript()
        _ = s.machine.setSelectedStore(externalId: "st", mode: .retailer, at: at(0))
        _ = try s.cart(0, lines(("B", 0)))
        _ = try s.delta(1, lines(("B", 1)))
        _ = try s.cart(2, lines(("B", 1)))
        _ = try s.delta(3, lines(("A", 2)))
        _ = s.tick(20)
        #expect(s.machine.state.rolledBack.map(\.seq) == [2])
        let paid = try s.machine.handlePayment(totalPrice: Money("5")!, productList: lines(("B", 1)), orderId: "o", at: at(21))
        #expect(paid.contains { if case .basketClosed = $0 { true } else { false } }, "\(paid)")
        // The completion emptied the cart; the host applies #2 after the payment.
        _ = try s.cart(22, [])
        let effects = try s.cart(23, lines(("A", 2)), syncedThrough: acknowledged ? 2 : nil)
        #expect(effects.contains(acknowledged ? .lateAcknowledgement(seq: 2) : .lateEcho(seq: 2)), "\(effects)")
        #expect(s.confirmed == ["A": 2], "Mealz's units in the new basket")
    }

    /// docs/spec.md §4 rule 5: the host applies in seq order, so a cart showing one unit of two
    /// equal batches — #1 rolled back, #2 pending — shows #1 (confirmed late), and #2 still waits.
    @Test func oneUnitShowsTheFirstOfTwoEqualBatchesRolledBackOrPending() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = s.tick(12)
        _ = try s.delta(13, lines(("A", 1)))
        let effects = try s.cart(14, lines(("X", 1), ("A", 1)))
        #expect(effects.contains(.lateEcho(seq: 1)) && !effects.contains(.settled(seq: 2)), "\(effects)")
        #expect(s.pendingSeqs == [2])
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 1, "apply still applies #2")
    }

    /// docs/spec.md §4 rules 4–5: #2 shown while #1 waits, then #1 rolled back: the host went
    /// past #1 (it applies in seq order), so a legacy host moving to apply does not get #2 again.
    @Test func aRollbackBelowAShownBatchMovesTheHostProgress() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("X", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("B", 1)))
        #expect(try s.cart(3, lines(("X", 1), ("B", 1))).contains(.settled(seq: 2)))
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 0)
        _ = s.tick(12)
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 2)
    }

    /// docs/spec.md §4 rules 4–5: a batch rolled back below one a cart showed was skipped by the
    /// host; a later acknowledgement covering it (a legacy host moving to apply, which starts
    /// after it) does not confirm it late: the shopper's own A stays the shopper's.
    @Test func anAcknowledgementDoesNotConfirmABatchTheHostWentPast() throws {
        var s = Transcript()
        _ = try s.cart(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.delta(2, lines(("B", 1)))
        _ = try s.cart(3, lines(("A", 1), ("B", 1)))
        _ = s.tick(12)
        #expect(s.machine.state.hostProgress(claim: nil, writtenThrough: 2) == 2)
        let applied = s.machine.hostApplied(through: 2, at: at(13))
        #expect(!applied.contains(.lateAcknowledgement(seq: 1)), "\(applied)")
        #expect(s.confirmed == ["B": 1])
    }
}
