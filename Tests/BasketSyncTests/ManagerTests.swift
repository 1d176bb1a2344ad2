import BasketSync
import Synchronization
import Testing

/// The SDK facade: registration, delivery to the synchronizer, completions, the injected clock.
@Suite struct ManagerTests {
    /// A host cart that applies deltas as a host does (clamping at 0).
    final class HostCart: RetailerBasketSynchronizer {
        let lines = Mutex<[ExactID: Int]>([:])
        func updateBasket(products: [RetailerProduct]) {
            lines.withLock { cart in RetailerProduct.apply(products, to: &cart) }
        }
    }

    final class Clock: Sendable {
        let seconds = Mutex<Double>(0)
        func now() -> Date { at(seconds.withLock { $0 }) }
        func advance(_ by: Double) { seconds.withLock { $0 += by } }
    }

    @Test func deliversBatchesToTheRegisteredSynchronizerOnly() throws {
        let clock = Clock()
        let manager = BasketSynchronizationManager(state: SyncState(syncId: "m"), clock: clock.now)
        let ignored = try manager.receive(.basketDelta(lines(("A", 1))), source: "e1")
        #expect(ignored == [.ignored(IgnoredBatch(source: "e1", products: lines(("A", 1))))])

        let host = HostCart()
        manager.registerRetailerBasketSynchronizer(synchronizer: host)
        try manager.receive(.basketDelta(lines(("A", 2), ("B", 1))))
        try manager.receive(.basketState(lines(("A", 1))))
        #expect(host.lines.withLock { $0 } == ["A": 1])  // B removed at 0, as a host does
        #expect(manager.mealzView == ["A": 1])
        #expect(manager.nextDeadline == at(10))

        clock.advance(1)
        let cart = host.lines.withLock { $0 }.map { RetailerProduct(id: $0.key.string, quantity: $0.value) }
        let effects = try manager.notifyRetailerBasketChanged(productLists: cart, syncedThrough: 2)
        #expect(effects.contains(.settled(seq: 2)))
        #expect(manager.state.confirmed == ["A": 1])
        #expect(manager.nextDeadline == nil)

        manager.unregisterRetailerBasketSynchronizer()
        try manager.receive(.basketDelta(lines(("C", 1))))
        #expect(host.lines.withLock { $0 }["C"] == nil)
        #expect(manager.state.counters.ignored == 2)
    }

    @Test func batchesFromManyThreadsReachTheSynchronizerInSeqOrder() async throws {
        final class Recorder: RetailerBasketSynchronizer {
            let ids = Mutex<[String]>([])
            func updateBasket(products: [RetailerProduct]) { ids.withLock { $0.append(products[0].id) } }
        }
        let recorder = Recorder()
        let manager = BasketSynchronizationManager(state: SyncState(syncId: "m"), clock: Clock().now)
        manager.registerRetailerBasketSynchronizer(synchronizer: recorder)
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                group.addTask { _ = try? manager.receive(.basketDelta(lines(("sku-\(index)", 1)))) }
            }
        }
        let delivered = recorder.ids.withLock { $0 }
        #expect(delivered.count == 200)
        #expect(manager.state.lastOutboxSeq == 200)
        // Batch n is the n-th delivered: seq order and delivery order agree.
        #expect(manager.state.pending.map { $0.products[0].id } == delivered)
    }

    @Test func handlePaymentRunsTheCompletionOnlyWhenRecorded() throws {
        let manager = BasketSynchronizationManager(state: SyncState(syncId: "m"), clock: Clock().now)
        var completions = 0
        #expect(throws: PaymentError.notRetailerMode) {
            try manager.handlePayment(totalPrice: money("1"), productList: [], orderId: "o-1") { completions += 1 }
        }
        #expect(completions == 0)
        manager.setSelectedStoreWithExternalId("store-1", mode: .retailer)
        try manager.handlePayment(totalPrice: money("1"), productList: [], orderId: "o-1") { completions += 1 }
        let retry = try manager.handlePayment(totalPrice: money("1.00"), productList: [], orderId: "o-1") { completions += 1 }
        #expect(retry == [.paymentAlreadyRecorded(orderId: "o-1", seq: 1)])
        #expect(completions == 1, "the completion ran: a retry never runs it again (it may clear a cart filled since)")
        #expect(throws: PaymentError.differentRetry(orderId: "o-1", seq: 1, difference: "the total 9.99 is not the 1 recorded")) {
            try manager.handlePayment(totalPrice: money("9.99"), productList: [], orderId: "o-1") { completions += 1 }
        }
        #expect(completions == 1)
        #expect(manager.state.lastPaymentSeq == 1)
        #expect(manager.paymentStarted(totalPrice: money("2"), productList: []).count == 1)
        #expect(manager.paymentStarted(totalPrice: money("2"), productList: [], orderId: "o-1") == [.paymentAlreadyRecorded(orderId: "o-1", seq: 1)],
                "a payment that starts for an order already paid records nothing")
    }

    @Test func aRetryThatGivesOtherProductsDiffers() {
        let record = PaymentRecord(seq: 3, type: .handlePayment, at: Date(timeIntervalSince1970: 0), status: .recorded, reason: nil, storeId: "s",
                                   orderId: "o", totalPrice: money("2.50"), products: [.init(id: "A", quantity: 2), .init(id: "café", quantity: 1)], mealzProducts: [], basket: 1)
        #expect(record.retryDifference(totalPrice: money("2.5"), productList: nil) == nil)
        #expect(record.retryDifference(totalPrice: money("2.5"), productList: [.init(id: "café", quantity: 1), .init(id: "A", quantity: 1), .init(id: "A", quantity: 1), .init(id: "Z", quantity: 0)]) == nil)
        #expect(record.retryDifference(totalPrice: money("2.5"), productList: [.init(id: "A", quantity: 2), .init(id: "cafe\u{301}", quantity: 1)])
                == "the products {\"A\": 2, \"café\": 1} are not the {\"A\": 2, \"café\": 1} recorded (ids that look alike differ in their bytes)", "ids compare byte for byte")
        #expect(record.retryDifference(totalPrice: money("3"), productList: []) == "the total 3 is not the 2.50 recorded, and the products {} are not the {\"A\": 2, \"café\": 1} recorded")
    }
}
