/// One line of a basket: a retailer SKU and a quantity.
///
/// In `notifyRetailerBasketChanged` and `basketState` the quantity is absolute (≥ 0); in
/// `updateBasket` batches it is a signed delta (+n add n, −n remove n), never a final quantity.
public struct RetailerProduct: Codable, Hashable, Sendable {
    /// The retailer's product id (SKU).
    public var id: String
    /// The absolute quantity or the signed delta, depending on the direction.
    public var quantity: Int

    /// Creates a basket line.
    public init(id: String, quantity: Int) {
        self.id = id
        self.quantity = quantity
    }

    /// Equal when the ids have the same bytes (ids are not Unicode-normalized) and the
    /// quantities are equal.
    public static func == (lhs: RetailerProduct, rhs: RetailerProduct) -> Bool {
        lhs.quantity == rhs.quantity && lhs.id.isByteEqual(to: rhs.id)
    }

    /// Hashes the id's bytes and the quantity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ExactID(id))
        hasher.combine(quantity)
    }
}

extension RetailerProduct {
    /// The rule every host applies to one `updateBasket` line: `quantity` plus the signed `delta`,
    /// never below 0 (a host asked to remove more than it has removes what it has), and pinned at
    /// `Int.max` instead of overflowing, so hostile quantities never crash.
    ///
    /// The library applies it wherever it predicts what a host holds; `basket-sync apply`, the
    /// samples and the tests apply it as the host does.
    public static func applying(delta: Int, to quantity: Int) -> Int {
        max(0, quantity.saturatingAdd(delta))
    }

    /// Applies a batch of signed deltas to a cart of SKU → quantity, the way a host does:
    /// each line by ``applying(delta:to:)``, a line that reaches 0 removed.
    public static func apply(_ deltas: [RetailerProduct], to cart: inout [ExactID: Int]) {
        for line in deltas {
            let id = ExactID(line.id)
            let quantity = applying(delta: line.quantity, to: cart[id] ?? 0)
            cart[id] = quantity == 0 ? nil : quantity
        }
    }
}

extension Int {
    /// `self + other`, pinned at the bounds instead of trapping: hostile quantities never crash.
    func saturatingAdd(_ other: Int) -> Int {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }
}
