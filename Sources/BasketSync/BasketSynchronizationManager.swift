import Synchronization

/// The host's side of Mealz → host synchronization: receives the signed deltas Mealz pushes.
///
/// Register one with ``BasketSynchronizationManager/registerRetailerBasketSynchronizer(synchronizer:)``.
/// Quantities are deltas (+n add n, −n remove n), never final quantities; a host clamps a line at
/// 0 when asked to remove more than it has.
public protocol RetailerBasketSynchronizer: AnyObject, Sendable {
    /// Applies one batch of signed deltas to the host cart.
    func updateBasket(products: [RetailerProduct])
}

/// The SDK's entry point, for a Swift host that embeds the library: it owns one sync state,
/// delivers `updateBasket` batches to the registered synchronizer, and returns every effect.
///
/// Create one instance per cart. It is thread-safe; the clock is injected, so that tests and
/// replays decide what time it is. Nothing here reads a file or arms a timer: call
/// ``expirePendingWindows()`` at ``nextDeadline``.
public final class BasketSynchronizationManager: Sendable {
    private struct Inner: Sendable {
        var machine: SyncStateMachine
        var synchronizer: (any RetailerBasketSynchronizer)?
        /// The `handlePayment` records this manager made, by order id, to check a retry against.
        var payments: [ExactID: PaymentRecord] = [:]
    }

    private let inner: Mutex<Inner>
    /// Held from computing a batch to delivering it, so batches reach the synchronizer in seq
    /// order even when events come from several threads. The state lock is released before
    /// delivery: the synchronizer may call ``notifyRetailerBasketChanged(productLists:syncedThrough:)``.
    private let delivery = Mutex(())
    private let clock: @Sendable () -> Date

    /// Creates a manager from a state (fresh or restored), settings and a clock.
    public init(state: SyncState, configuration: SyncConfiguration = .init(), clock: @escaping @Sendable () -> Date) {
        self.inner = Mutex(Inner(machine: SyncStateMachine(state: state, configuration: configuration)))
        self.clock = clock
    }

    /// The current state, to persist.
    public var state: SyncState { inner.withLock { $0.machine.state } }

    /// Mealz's basket as the WebView shows it: confirmed plus pending quantities.
    public var mealzView: [ExactID: Int] { inner.withLock { $0.machine.mealzView } }

    /// When ``expirePendingWindows()`` is next due, if any batch waits for an echo.
    public var nextDeadline: Date? { inner.withLock { $0.machine.nextDeadline } }

    /// Registers the host's synchronizer: from now on Mealz deltas are delivered to it.
    public func registerRetailerBasketSynchronizer(synchronizer: any RetailerBasketSynchronizer) {
        inner.withLock {
            $0.synchronizer = synchronizer
            $0.machine.isSynchronizerRegistered = true
        }
    }

    /// Unregisters the synchronizer: Mealz deltas are ignored again (and counted), as in the SDK.
    public func unregisterRetailerBasketSynchronizer() {
        inner.withLock {
            $0.synchronizer = nil
            $0.machine.isSynchronizerRegistered = false
        }
    }

    /// Reports the host cart: absolute quantities of every line (other SKUs are filtered out
    /// here), and the highest outbox seq the host has processed, if it tracks one.
    @discardableResult
    public func notifyRetailerBasketChanged(productLists: [RetailerProduct], syncedThrough: UInt64? = nil) throws(SyncInputError) -> [SyncEffect] {
        let now = clock()
        return try inner.withLock { inner throws(SyncInputError) in
            try inner.machine.retailerBasketChanged(productLists, syncedThrough: syncedThrough, at: now)
        }
    }

    /// Takes a Mealz-side event; the resulting `updateBasket` batches go to the synchronizer.
    @discardableResult
    public func receive(_ event: MealzEvent, source: String? = nil) throws(SyncInputError) -> [SyncEffect] {
        try delivery.withLock { _ throws(SyncInputError) in
            let now = clock()
            let (effects, synchronizer) = try inner.withLock { inner throws(SyncInputError) in
                (try inner.machine.receive(event, source: source, at: now), inner.synchronizer)
            }
            deliver(effects, to: synchronizer)
            return effects
        }
    }

    /// Rolls back the batches whose pending window is over.
    @discardableResult
    public func expirePendingWindows() -> [SyncEffect] {
        let now = clock()
        return inner.withLock { $0.machine.expireWindows(at: now) }
    }

    /// Records that a payment started: best-effort, never fails (a `skipped` record says why).
    @discardableResult
    public func paymentStarted(totalPrice: Money, productList: [RetailerProduct], orderId: String? = nil) -> [SyncEffect] {
        let now = clock()
        return inner.withLock {
            $0.machine.paymentStarted(totalPrice: totalPrice, productList: productList, orderId: orderId, at: now)
        }
    }

    /// Records a payment once per order id, closes the Mealz basket, then runs `completion`.
    /// Without retailer mode or a store it throws and runs no completion. A retry of an order
    /// already recorded is answered with ``SyncEffect/paymentAlreadyRecorded(orderId:seq:)`` and
    /// does not run `completion` again (it may clear a cart filled again since); a retry whose
    /// total differs throws ``PaymentError/differentRetry(orderId:seq:difference:)``.
    @discardableResult
    public func handlePayment(
        totalPrice: Money, productList: [RetailerProduct], orderId: String, completion: () -> Void
    ) throws(PaymentError) -> [SyncEffect] {
        let now = clock()
        let effects = try inner.withLock { inner throws(PaymentError) in
            if let earlier = inner.payments[ExactID(orderId)], let difference = earlier.retryDifference(totalPrice: totalPrice, productList: nil) {
                throw PaymentError.differentRetry(orderId: orderId, seq: earlier.seq, difference: difference)
            }
            let effects = try inner.machine.handlePayment(totalPrice: totalPrice, productList: productList, orderId: orderId, at: now)
            for case let .payment(record) in effects where record.type == .handlePayment {
                inner.payments[ExactID(orderId)] = record
            }
            return effects
        }
        let isNew = effects.contains { if case .payment = $0 { true } else { false } }
        if isNew { completion() }
        return effects
    }

    /// Selects the store (and the mode, when given); a new store starts a new Mealz basket.
    @discardableResult
    public func setSelectedStoreWithExternalId(_ externalId: String?, mode: SyncMode? = nil) -> [SyncEffect] {
        let now = clock()
        return inner.withLock { $0.machine.setSelectedStore(externalId: externalId, mode: mode, at: now) }
    }

    /// Calls the synchronizer outside the lock, so that it may call back into the manager.
    private func deliver(_ effects: [SyncEffect], to synchronizer: (any RetailerBasketSynchronizer)?) {
        guard let synchronizer else { return }
        for case let .outbox(record) in effects where record.type == .updateBasket {
            synchronizer.updateBasket(products: record.products)
        }
    }
}
