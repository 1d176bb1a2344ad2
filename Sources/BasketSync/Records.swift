/// A record of the outbox: something the host must do, in `seq` order, exactly once.
public struct OutboxRecord: Codable, Hashable, Sendable {
    /// What the host must do.
    public enum RecordType: String, Codable, Hashable, Sendable {
        /// Apply the signed deltas of `products` to the host cart (clamping each line at 0).
        case updateBasket
        /// The shopper asked to open the host's cart.
        case redirectToCart
    }

    /// Position in the outbox: starts at 1 and rises by exactly 1 per record, forever.
    public var seq: UInt64
    /// A unique id for the record: the sync directory's id and the seq.
    public var id: String
    /// What the host must do.
    public var type: RecordType
    /// When the record was made.
    public var at: Date
    /// The id of the Mealz event that caused the record, if any.
    public var source: String?
    /// Signed deltas for `updateBasket`; empty for `redirectToCart`.
    public var products: [RetailerProduct]
    /// The affiliated basket's id when the batch lands a `basketTransfer`.
    public var transferId: String?

    /// Creates an outbox record.
    public init(
        seq: UInt64, id: String, type: RecordType, at: Date, source: String?,
        products: [RetailerProduct] = [], transferId: String? = nil
    ) {
        self.seq = seq
        self.id = id
        self.type = type
        self.at = at
        self.source = source
        self.products = products
        self.transferId = transferId
    }
}

/// A `notifyRetailerBasketChanged` sent to Mealz: the absolute Mealz-related lines of the host cart.
public struct BasketNotification: Codable, Hashable, Sendable {
    /// Position in the notifications: starts at 1 and rises by exactly 1.
    public var seq: UInt64
    /// When the notification was made.
    public var at: Date
    /// Absolute quantities of the Mealz-related lines now in the host cart, in cart order.
    public var products: [RetailerProduct]
    /// The highest outbox seq the host has processed, if it ever said so.
    public var syncedThrough: UInt64?

    /// Creates a notification.
    public init(seq: UInt64, at: Date, products: [RetailerProduct], syncedThrough: UInt64?) {
        self.seq = seq
        self.at = at
        self.products = products
        self.syncedThrough = syncedThrough
    }
}

/// An `updateBasket` batch sent to the host and not yet settled.
public struct PendingBatch: Codable, Hashable, Sendable {
    /// The batch's outbox seq.
    public var seq: UInt64
    /// The signed deltas.
    public var products: [RetailerProduct]
    /// When the batch was sent.
    public var at: Date
    /// When the batch is rolled back if the host has not echoed it; nil for a host that
    /// acknowledges with `syncedThrough` (it waits for the acknowledgement, however long).
    public var deadline: Date?

    /// Creates a pending batch.
    public init(seq: UInt64, products: [RetailerProduct], at: Date, deadline: Date?) {
        self.seq = seq
        self.products = products
        self.at = at
        self.deadline = deadline
    }
}

/// Deltas that Mealz pushed while no `RetailerBasketSynchronizer` was registered.
public struct IgnoredBatch: Codable, Hashable, Sendable {
    /// The id of the Mealz event, if any.
    public var source: String?
    /// The deltas that were not delivered.
    public var products: [RetailerProduct]

    /// Creates an ignored batch.
    public init(source: String?, products: [RetailerProduct]) {
        self.source = source
        self.products = products
    }
}

/// Whether the host runs Mealz in retailer mode, where payments are recorded.
public enum SyncMode: String, Codable, Hashable, Sendable {
    /// Retailer mode: payments are recorded once a store is set.
    case retailer
    /// Any other mode: payments are not recorded.
    case standalone
}

/// A payment event for Mealz: `paymentStarted` or `handlePayment`.
public struct PaymentRecord: Codable, Hashable, Sendable {
    /// Which SDK call made the record.
    public enum PaymentType: String, Codable, Hashable, Sendable {
        /// `paymentStarted`: best-effort, never fails.
        case paymentStarted
        /// `handlePayment`: recorded once per order id.
        case handlePayment
    }

    /// Whether Mealz tracks the payment.
    public enum Status: String, Codable, Hashable, Sendable {
        /// The payment is recorded for Mealz.
        case recorded
        /// Nothing for Mealz to track; `reason` says why.
        case skipped
    }

    /// Why a payment was skipped.
    public enum SkipReason: String, Codable, Hashable, Sendable {
        /// The mode is not retailer mode.
        case notRetailerMode
        /// No store was set with `setSelectedStoreWithExternalId`.
        case noStore
        /// None of the products bought is a Mealz product.
        case noMealzProduct
        /// The product list was not valid (an empty id or a negative quantity).
        case invalidProducts
    }

    /// Position in the payments: starts at 1 and rises by exactly 1.
    public var seq: UInt64
    /// Which SDK call made the record.
    public var type: PaymentType
    /// When the record was made.
    public var at: Date
    /// Recorded or skipped.
    public var status: Status
    /// Why it was skipped; nil when recorded.
    public var reason: SkipReason?
    /// The store set at the time, if any.
    public var storeId: String?
    /// The host's order id, if given.
    public var orderId: String?
    /// The exact total.
    public var totalPrice: Money
    /// Every product bought, as given.
    public var products: [RetailerProduct]
    /// The Mealz part of the products: Mealz-related lines, at most Mealz's own quantity.
    public var mealzProducts: [RetailerProduct]
    /// The Mealz basket the payment belongs to.
    public var basket: UInt64

    /// Creates a payment record.
    public init(
        seq: UInt64, type: PaymentType, at: Date, status: Status, reason: SkipReason?,
        storeId: String?, orderId: String?, totalPrice: Money,
        products: [RetailerProduct], mealzProducts: [RetailerProduct], basket: UInt64
    ) {
        self.seq = seq
        self.type = type
        self.at = at
        self.status = status
        self.reason = reason
        self.storeId = storeId
        self.orderId = orderId
        self.totalPrice = totalPrice
        self.products = products
        self.mealzProducts = mealzProducts
        self.basket = basket
    }
}

/// Why `handlePayment` failed; no record was made and the completion was not run.
public enum PaymentError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The mode is not retailer mode.
    case notRetailerMode
    /// No store is set.
    case noStore
    /// The order id is empty.
    case emptyOrderId
    /// The product list is not valid.
    case invalidProducts(SyncInputError)

    /// A sentence saying what is wrong and what to do.
    public var description: String {
        switch self {
        case .notRetailerMode:
            return "payments are recorded only in retailer mode; set it with set-store STORE_ID --mode retailer"
        case .noStore:
            return "no store is set; set one with set-store STORE_ID (setSelectedStoreWithExternalId)"
        case .emptyOrderId:
            return "the order id is empty; give the host's order id"
        case let .invalidProducts(error):
            return "the product list is not valid: \(error)"
        }
    }
}

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
    /// The host applied a batch after its window had expired (the SDK's documented race).
    case lateEcho(seq: UInt64)
    /// Mealz pushed deltas while no synchronizer was registered: not delivered, counted.
    case ignored(IgnoredBatch)
    /// A `basketTransfer` with this transfer id already landed: not landed again.
    case duplicateTransfer(transferId: String)
    /// `handlePayment` for an order already recorded: not recorded again.
    case paymentAlreadyRecorded(orderId: String, seq: UInt64)
    /// The host acknowledged a seq beyond the last one written (its cart may come from another
    /// sync directory, or the database was reset).
    case acknowledgementBeyondOutbox(syncedThrough: UInt64, lastSeq: UInt64)
    /// A `handlePayment` closed the Mealz basket; the next cart starts this new basket.
    case basketClosed(newBasket: UInt64)
    /// The store or the mode changed; a new store starts the basket of this number.
    case storeChanged(storeId: String?, mode: SyncMode, basket: UInt64)
    /// Wake at this instant and call `expireWindows(at:)`: the earliest pending deadline.
    case armTimer(at: Date)
    /// No pending window is open any more: no wake-up is needed.
    case disarmTimer
}
