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
    /// The Mealz basket the notification belongs to: a WebView sends it back with its
    /// `basketState`, so that a state based on a closed basket is known stale.
    public var basket: UInt64

    /// Creates a notification.
    public init(seq: UInt64, at: Date, products: [RetailerProduct], syncedThrough: UInt64?, basket: UInt64) {
        self.seq = seq
        self.at = at
        self.products = products
        self.syncedThrough = syncedThrough
        self.basket = basket
    }
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

extension PaymentRecord {
    /// How a retry of this `handlePayment` differs from it, as a sentence naming both; nil when
    /// the retry is the same payment. Totals compare by amount (`42.5` is `42.50`); a product list
    /// is compared only when the retry gives one (the default list, the current cart, has usually
    /// been emptied by the host's completion since), as totals per SKU, byte for byte, in any order.
    public func retryDifference(totalPrice retryTotal: Money, productList retryProducts: [RetailerProduct]?) -> String? {
        var differences: [String] = []
        if retryTotal != totalPrice {
            differences.append("the total \(retryTotal) is not the \(totalPrice) recorded")
        }
        if let retryProducts {
            let given = ProductTally(retryProducts).nonZeroProducts
            let recorded = ProductTally(products).nonZeroProducts
            if Set(given) != Set(recorded) {
                let (shownGiven, shownRecorded) = (PaymentRecord.listed(given), PaymentRecord.listed(recorded))
                differences.append("the products \(shownGiven) are not the \(shownRecorded) recorded"
                                   + (shownGiven == shownRecorded ? " (ids that look alike differ in their bytes)" : ""))
            }
        }
        return differences.isEmpty ? nil : differences.joined(separator: ", and ")
    }

    /// A short product list for a message: `{A: 2, B: 1}`, ids quoted when they need it.
    static func listed(_ products: [RetailerProduct]) -> String {
        let shown = products.prefix(8).map { "\($0.id.debugDescription): \($0.quantity)" }
        return "{" + shown.joined(separator: ", ") + (products.count > 8 ? ", … \(products.count - 8) more" : "") + "}"
    }
}
