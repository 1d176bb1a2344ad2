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
}

/// A problem with the products handed to the library; nothing was changed.
public enum SyncInputError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A line has an empty id.
    case emptyProductId
    /// A line that must be absolute has a negative quantity.
    case negativeQuantity(id: String, quantity: Int)

    /// A sentence saying what is wrong and what to do.
    public var description: String {
        switch self {
        case .emptyProductId:
            return "a product has an empty id; give every line a non-empty \"id\""
        case let .negativeQuantity(id, quantity):
            return "product \"\(id)\" has quantity \(quantity); absolute quantities must be 0 or more"
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

/// An ordered map of SKU → quantity that keeps the order in which SKUs first appeared.
///
/// Batches and notifications are written in this order, so output is deterministic and follows
/// the order of the input.
struct ProductTally: Equatable {
    private(set) var order: [String] = []
    private(set) var quantities: [String: Int] = [:]

    init() {}

    /// Sums the lines per SKU (the same id twice adds up).
    init(_ products: [RetailerProduct]) {
        for product in products { add(product.id, product.quantity) }
    }

    mutating func add(_ id: String, _ quantity: Int) {
        if let current = quantities[id] {
            quantities[id] = current.saturatingAdd(quantity)
        } else {
            order.append(id)
            quantities[id] = quantity
        }
    }

    /// The lines in first-appearance order, without the lines whose quantity is 0.
    var nonZeroProducts: [RetailerProduct] {
        order.compactMap { id in
            let quantity = quantities[id]!
            return quantity == 0 ? nil : RetailerProduct(id: id, quantity: quantity)
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
        return ProductTally(self)
    }

    /// Checks that the lines form a valid delta batch: non-empty ids, any sign.
    func validatedDeltas() throws(SyncInputError) -> ProductTally {
        for product in self where product.id.isEmpty { throw .emptyProductId }
        return ProductTally(self)
    }
}
