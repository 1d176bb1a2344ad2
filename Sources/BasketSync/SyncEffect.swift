/// What to do after an input: the state machine's output, run by the shell in order.
public enum SyncEffect: Hashable, Sendable {
    /// Append this record to the outbox for the host (an `updateBasket` batch or a redirect).
    case outbox(OutboxRecord)
    /// Send this `notifyRetailerBasketChanged` to Mealz.
    case notify(BasketNotification)
    /// Record this payment event.
    case payment(PaymentRecord)
    /// The host applied or acknowledged the batch of this seq; it is now part of Mealz's basket.
    case settled(seq: UInt64)
    /// The host did not echo this batch within the pending window: Mealz's view no longer counts it.
    case rolledBack(PendingBatch)
    /// The host applied a batch after its window had expired (the SDK's documented race); its
    /// units are Mealz's after all.
    case lateEcho(seq: UInt64)
    /// The host's acknowledgement covers a batch its window had rolled back (its first
    /// `syncedThrough` came late); the batch is settled after all.
    case lateAcknowledgement(seq: UInt64)
    /// Mealz pushed deltas while no synchronizer was registered: not delivered, counted.
    case ignored(IgnoredBatch)
    /// A Mealz delta would have taken a line of the host cart past `limit` (with the batches
    /// pending on their way): recorded as `recorded` instead of `asked` (0: left out).
    case clampedAtLimit(id: String, asked: Int, recorded: Int, limit: Int)
    /// A `basketTransfer` with this transfer id already landed: not landed again.
    case duplicateTransfer(transferId: String)
    /// `handlePayment` for an order already recorded: not recorded again.
    case paymentAlreadyRecorded(orderId: String, seq: UInt64)
    /// The host acknowledged a seq beyond the last one written (its cart may come from another
    /// sync directory, or the database was reset): it acknowledges nothing.
    case acknowledgementBeyondOutbox(syncedThrough: UInt64, lastSeq: UInt64)
    /// The host's cart claimed records made after it was written (`writtenThrough`: the last seq
    /// that existed then): a counter that says nothing true, it acknowledges nothing.
    case acknowledgementBeforeRecords(syncedThrough: UInt64, writtenThrough: UInt64)
    /// A cart without `syncedThrough` from a host that acknowledges: it acknowledges nothing new,
    /// and an acknowledging host's cart never settles a batch by showing it (it may be the
    /// shopper's own units).
    case acknowledgementMissing
    /// The host's `syncedThrough` went back below the highest it acknowledged (an old cart
    /// restored?): nothing is un-settled, and `apply` does not apply those records again.
    case acknowledgementWentBack(syncedThrough: UInt64, highest: UInt64)
    /// A `handlePayment` closed the Mealz basket; the next cart starts this new basket.
    case basketClosed(newBasket: UInt64)
    /// A `basketState` based on another basket than the current one (a closed basket): ignored,
    /// never diffed.
    case staleState(basket: UInt64, current: UInt64)
    /// The store or the mode changed; a new store starts the basket of this number.
    case storeChanged(storeId: String?, mode: SyncMode, basket: UInt64)
    /// Wake at this instant and call `expireWindows(at:)`: the earliest pending deadline.
    case armTimer(at: Date)
    /// No pending window is open any more: no wake-up is needed.
    case disarmTimer
}
