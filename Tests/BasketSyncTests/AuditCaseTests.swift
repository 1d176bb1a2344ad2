import BasketSync
import Testing

/// Ways a synchronizer can double or lose units, each as the transcript that does it.
/// The agent's two (an older cart committed after a newer one, inbox order) are in the CLI tests.
@Suite struct AuditCaseTests {
    /// A host's cart, as the host applies the outbox: every delta once, clamped at 0.
    struct Host {
        var cart: [ExactID: Int]
        var processed: UInt64 = 0
        mutating func apply(_ effects: [SyncEffect]) {
            for case let .outbox(record) in effects where record.seq > processed {
                RetailerProduct.apply(record.products, to: &cart)
                processed = record.seq
            }
        }
        var lines: [RetailerProduct] { cart.keys.sorted().map { RetailerProduct(id: $0.string, quantity: cart[$0]!) } }
    }

    /// Case 2: the first acknowledgement arrives after the window: it settles the batch it covers.
    @Test func aLateFirstAcknowledgementSettlesTheRolledBackBatch() throws {
        var s = Transcript(window: .seconds(1))
        var host = Host(cart: [:])
        let made = try s.delta(0, lines(("A", 2)), source: "e1")
        #expect(try s.cart(0.1, []) == [notify(1, 0.1, [])])
        _ = s.tick(1.5)
        #expect(s.view == [:])
        host.apply(made)
        let acknowledged = try s.cart(2, host.lines, syncedThrough: 1)
        #expect(acknowledged.contains(.lateAcknowledgement(seq: 1)))
        #expect(s.confirmed == ["A": 2], "the batch is Mealz's after all")
        #expect(s.view == ["A": 2])
        host.apply(try s.state(3, lines(("A", 2)), source: "s1"))
        #expect(host.cart == ["A": 2], "the WebView's unchanged state pushes nothing")
        #expect(s.machine.state.counters.lateAcknowledgements == 1)
    }

    /// Case 4: a `syncedThrough` beyond the outbox acknowledges nothing, and repeated, settles
    /// nothing made since; an honest claim afterwards settles what it covers.
    @Test func anAcknowledgementBeyondTheOutboxDoesNotCoverLaterBatches() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)), source: "b1")
        let beyond = try s.cart(1, lines(("A", 1)), syncedThrough: 100)
        #expect(beyond.contains(.acknowledgementBeyondOutbox(syncedThrough: 100, lastSeq: 1)))
        #expect(s.machine.state.hostSyncedThrough == 0)
        _ = try s.delta(2, lines(("B", 3)), source: "b2")
        _ = try s.cart(3, lines(("A", 1)), syncedThrough: 100)
        #expect(s.pendingSeqs == [1, 2], "neither is acknowledged by a claim beyond the outbox")
        #expect(s.machine.state.hostSyncedThrough == 0)
        _ = try s.cart(4, lines(("A", 1), ("B", 3)), syncedThrough: 2)
        #expect(s.pendingSeqs == [])
        #expect(s.confirmed == ["A": 1, "B": 3])
        #expect(s.machine.state.counters.acknowledgementsBeyondOutbox == 1, "one report per claim, not per cart")
    }

    /// Case 5: a skipped `handlePayment` (no Mealz product) leaves the basket as it is.
    @Test func aSkippedHandlePaymentDoesNotCloseTheBasket() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 2), ("B", 1)))
        _ = try s.cart(1, lines(("A", 2), ("B", 1), ("X", 1)), syncedThrough: 1)
        _ = s.machine.setSelectedStore(externalId: "S1", mode: .retailer, at: at(2))
        let paid = try s.machine.handlePayment(totalPrice: money("9.99"), productList: lines(("X", 1)), orderId: "o-x", at: at(3))
        #expect(!paid.contains { if case .basketClosed = $0 { true } else { false } })
        #expect(s.confirmed == ["A": 2, "B": 1])
        #expect(try s.cart(4, lines(("A", 2), ("B", 1)), syncedThrough: 1) == [])
        #expect(try s.state(5, lines(("A", 2), ("B", 1))) == [])
    }

    /// Case 6: a batch pending at a recorded payment carries into the new basket.
    @Test func aBatchPendingAtAPaymentCarriesIntoTheNewBasket() throws {
        var s = Transcript()
        var host = Host(cart: ["A": 1])
        _ = try s.cart(0, host.lines, syncedThrough: 0)
        host.apply(try s.delta(1, lines(("A", 1))))
        host.processed = 1
        _ = try s.cart(2, host.lines, syncedThrough: 1)
        let pending = try s.delta(3, lines(("B", 2)))
        _ = s.machine.setSelectedStore(externalId: "S1", mode: .retailer, at: at(4))
        let paid = try s.machine.handlePayment(totalPrice: money("5"), productList: lines(("A", 1)), orderId: "o-1", at: at(5))
        #expect(paid.contains(.basketClosed(newBasket: 2)))
        #expect(s.pendingSeqs == [2], "on its way to the cart: Mealz counts it")
        #expect(s.view == ["B": 2])
        host.cart = [:]  // the completion empties the cart
        host.apply(pending)
        _ = try s.cart(6, host.lines, syncedThrough: 2)
        #expect(s.confirmed == ["B": 2])
        #expect(try s.state(7, lines(("B", 2))) == [], "the WebView's new basket holds B2 already")
    }

    /// Case 7: `syncedThrough` going back is reported and un-settles nothing.
    @Test func anAcknowledgementGoingBackIsReportedAndUndoesNothing() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        _ = try s.delta(1, lines(("A", 1)))
        _ = try s.cart(2, lines(("A", 2)), syncedThrough: 2)
        let back = try s.cart(3, lines(("A", 1)), syncedThrough: 1)
        #expect(back.contains(.acknowledgementWentBack(syncedThrough: 1, highest: 2)))
        #expect(s.machine.state.hostSyncedThrough == 2)
        #expect(s.pendingSeqs == [])
        _ = try s.cart(4, lines(("A", 1)), syncedThrough: 1)
        #expect(s.machine.state.counters.acknowledgementsWentBack == 1, "one report per claim")
    }

    /// Case 8: a recorded order is answered before any other check.
    @Test func aRetryOfARecordedOrderIsAnsweredFirst() throws {
        var s = Transcript()
        _ = s.machine.setSelectedStore(externalId: "S1", mode: .retailer, at: at(0))
        _ = try s.machine.handlePayment(totalPrice: money("1"), productList: [], orderId: "o-1", at: at(1))
        _ = s.machine.setSelectedStore(externalId: "S1", mode: .standalone, at: at(2))
        #expect(try s.machine.handlePayment(totalPrice: money("1"), productList: [], orderId: "o-1", at: at(3))
            == [.paymentAlreadyRecorded(orderId: "o-1", seq: 1)])
    }

    /// Case 8: a legacy host's cart written before a batch is not its echo, even taken right after it.
    @Test func aCartWrittenBeforeABatchDoesNotEchoIt() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 1)))
        let first = try s.cart(0.5, lines(("A", 1)), writtenWhenLastSeqWas: 0)
        #expect(!first.contains(.settled(seq: 1)))
        #expect(s.pendingSeqs == [1])
        #expect(s.view == ["A": 2], "the WebView counts the pending unit on top of the cart's")
        let echoed = try s.cart(1, lines(("A", 2)))
        #expect(echoed.contains(.settled(seq: 1)))
        #expect(s.confirmed == ["A": 1])
    }

    /// Case 8: after a late echo, or a notification with the shopper's extra units, the WebView
    /// repeating what it was told pushes nothing.
    @Test func theWebViewRepeatingWhatItWasToldPushesNothing() throws {
        var s = Transcript()
        _ = try s.delta(0, lines(("A", 2)))
        _ = try s.cart(1, lines(("A", 2)), syncedThrough: 1)
        _ = try s.cart(2, lines(("A", 5)), syncedThrough: 1)
        #expect(s.confirmed == ["A": 2])
        #expect(s.view == ["A": 5])
        #expect(try s.state(3, lines(("A", 5))) == [])

        var legacy = Transcript()
        _ = try legacy.cart(0, [])
        _ = try legacy.delta(1, lines(("A", 1)))
        _ = try legacy.cart(2, lines(("A", 1)))
        _ = try legacy.delta(3, lines(("A", 1)))
        _ = legacy.tick(13)
        let late = try legacy.cart(15, lines(("A", 2)))
        #expect(late.contains(.lateEcho(seq: 2)))
        #expect(legacy.confirmed == ["A": 2] && legacy.view == ["A": 2])
        #expect(try legacy.state(16, lines(("A", 2))) == [])
    }
}
