/// An ordered map of SKU → quantity that keeps the order in which SKUs first appeared.
///
/// Batches and notifications are written in this order, so output is deterministic and follows
/// the order of the input.
struct ProductTally: Equatable {
    private(set) var order: [ExactID] = []
    private(set) var quantities: [ExactID: Int] = [:]
    /// The first id whose lines added up past `Int`'s range (its sum is held at the bound).
    private(set) var overflowed: ExactID?

    init() {}

    /// Sums the lines per SKU (the same id twice adds up).
    init(_ products: [RetailerProduct]) {
        order.reserveCapacity(products.count)
        quantities.reserveCapacity(products.count)
        for product in products { add(ExactID(product.id), product.quantity) }
    }

    mutating func add(_ id: ExactID, _ quantity: Int) {
        // One hash for a new id (the usual case); a repeated id pays a second one.
        if let current = quantities.updateValue(quantity, forKey: id) {
            let (sum, overflow) = current.addingReportingOverflow(quantity)
            if overflow, overflowed == nil { overflowed = id }
            quantities[id] = overflow ? current.saturatingAdd(quantity) : sum
        } else {
            order.append(id)
        }
    }

    /// The tally, when no id's lines added up past `Int`'s range: never a sum held at the bound
    /// as if it were the quantity.
    func withinRange() throws(SyncInputError) -> ProductTally {
        if let overflowed { throw .quantitiesOverflow(id: overflowed.string) }
        return self
    }

    /// The lines in first-appearance order, without the lines whose quantity is 0.
    var nonZeroProducts: [RetailerProduct] {
        order.compactMap { id in
            let quantity = quantities[id]!
            return quantity == 0 ? nil : RetailerProduct(id: id.string, quantity: quantity)
        }
    }
}

extension Array where Element == RetailerProduct {
    /// Checks that the lines form a valid absolute list: non-empty ids, quantities ≥ 0.
    func validatedAbsolute() throws(SyncInputError) -> ProductTally {
        for product in self {
            if product.id.isEmpty { throw .emptyProductId }
            if product.quantity < 0 { throw .negativeQuantity(id: product.id, quantity: product.quantity) }
        }
        return try ProductTally(self).withinRange()
    }

    /// Checks that the lines form a valid delta batch: non-empty ids, any sign.
    func validatedDeltas() throws(SyncInputError) -> ProductTally {
        for product in self where product.id.isEmpty { throw .emptyProductId }
        return try ProductTally(self).withinRange()
    }
}
