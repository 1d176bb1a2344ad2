import BasketSync

/// The key names of the host's cart format (`products`, `id`, `quantity` by default).
public struct CartKeys: Equatable, Sendable {
    /// The key of the list of lines in a top-level object.
    public var products = "products"
    /// The key of a line's product id.
    public var id = "id"
    /// The key of a line's quantity.
    public var quantity = "quantity"

    /// The default names.
    public init() {}
}

/// Limits that keep hostile input from costing more than it should.
public struct InputLimits: Equatable, Sendable {
    /// The largest cart, inbox event or products file read, in bytes.
    public var maxFileBytes = 16 * 1024 * 1024
    /// The largest quantity (or delta, in absolute value) accepted on a line.
    public var maxQuantity = 1_000_000
    /// The longest product or event id accepted, in UTF-8 bytes.
    public var maxIdBytes = 256

    /// The defaults.
    public init() {}
}

/// A cart as the host wrote it.
struct HostCart: Equatable {
    var products: [RetailerProduct]
    var syncedThrough: UInt64?
}

/// An inbox event as the Mealz side wrote it.
struct InboxEvent: Equatable {
    var id: String
    var event: MealzEvent
}

/// Turns parsed JSON into carts and events, collecting every problem with its position.
struct Decoder {
    var keys = CartKeys()
    var limits = InputLimits()
    private(set) var problems: [JSONProblem] = []

    private mutating func problem(_ node: JSONNode, _ reason: String) {
        problems.append(JSONProblem(offset: node.offset, reason: reason))
    }

    private mutating func identifier(_ node: JSONNode?, in parent: JSONNode, key: String, what: String) -> String? {
        guard let node else {
            problem(parent, "\(what) has no \"\(key)\"; add one")
            return nil
        }
        guard case let .string(text) = node.value else {
            problem(node, "\"\(key)\" must be a string, not \(node.kind)")
            return nil
        }
        if text.isEmpty { problem(node, "\"\(key)\" is empty; give a non-empty id"); return nil }
        if text.utf8.count > limits.maxIdBytes {
            problem(node, "\"\(key)\" is \(text.utf8.count) bytes long, over the limit of \(limits.maxIdBytes)")
            return nil
        }
        if text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            problem(node, "\"\(key)\" contains a control character; ids are printable text")
            return nil
        }
        return text
    }

    private mutating func quantity(_ node: JSONNode?, in parent: JSONNode, signed: Bool) -> Int? {
        let key = keys.quantity
        guard let node else {
            problem(parent, "this line has no \"\(key)\"; add one")
            return nil
        }
        guard case let .number(text) = node.value else {
            problem(node, "\"\(key)\" must be a whole number, not \(node.kind)")
            return nil
        }
        guard let value = node.integer else {
            let isWhole = !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" })
            problem(node, isWhole ? "\"\(key)\" \(text) is out of range; the limit is \(limits.maxQuantity)" : "\"\(key)\" \(text) must be a whole number")
            return nil
        }
        if !signed && value < 0 {
            problem(node, "\"\(key)\" is \(value); an absolute quantity must be 0 or more")
            return nil
        }
        if value.magnitude > UInt(limits.maxQuantity) {
            problem(node, "\"\(key)\" \(value) is out of range; the limit is \(limits.maxQuantity)")
            return nil
        }
        return value
    }

    /// The lines of a products array; `signed` for deltas.
    private mutating func lines(_ node: JSONNode, signed: Bool) -> [RetailerProduct] {
        guard case let .array(elements) = node.value else {
            problem(node, "\"\(keys.products)\" must be an array of lines, not \(node.kind)")
            return []
        }
        var products: [RetailerProduct] = []
        products.reserveCapacity(elements.count)
        for element in elements {
            guard case .object = element.value else {
                problem(element, "a line must be an object like {\"\(keys.id)\": \"sku-1\", \"\(keys.quantity)\": 2}, not \(element.kind)")
                continue
            }
            let id = identifier(element[keys.id], in: element, key: keys.id, what: "this line")
            let quantity = quantity(element[keys.quantity], in: element, signed: signed)
            if let id, let quantity { products.append(RetailerProduct(id: id, quantity: quantity)) }
        }
        return products
    }

    /// A cart: an object with the products key and an optional `syncedThrough`, or a bare array.
    mutating func cart(_ root: JSONNode) -> HostCart? {
        let before = problems.count
        var cart = HostCart(products: [], syncedThrough: nil)
        switch root.value {
        case .array:
            cart.products = lines(root, signed: false)
        case .object:
            guard let products = root[keys.products] else {
                problem(root, "the cart has no \"\(keys.products)\" list; write {\"\(keys.products)\": [...]} or a bare array")
                return nil
            }
            cart.products = lines(products, signed: false)
            if let synced = root["syncedThrough"], case .null = synced.value {
                cart.syncedThrough = nil
            } else if let synced = root["syncedThrough"] {
                if let value = synced.integer, value >= 0 {
                    cart.syncedThrough = UInt64(value)
                } else {
                    problem(synced, "\"syncedThrough\" must be the highest outbox seq processed, a whole number 0 or more")
                }
            }
        default:
            problem(root, "a cart must be an object with \"\(keys.products)\" or an array of lines, not \(root.kind)")
        }
        return problems.count == before ? cart : nil
    }

    /// An inbox event: `{"id", "type", "products", "transferId"}`.
    mutating func event(_ root: JSONNode) -> InboxEvent? {
        let before = problems.count
        guard case .object = root.value else {
            problem(root, "an event must be an object with \"id\" and \"type\", not \(root.kind)")
            return nil
        }
        let id = identifier(root["id"], in: root, key: "id", what: "the event")
        guard let typeNode = root["type"] else {
            problem(root, "the event has no \"type\"; use basketDelta, basketState, basketTransfer or redirectToCart")
            return nil
        }
        guard case let .string(type) = typeNode.value else {
            problem(typeNode, "\"type\" must be a string, not \(typeNode.kind)")
            return nil
        }
        let event: MealzEvent?
        switch type {
        case "basketDelta": event = eventProducts(root, signed: true).map(MealzEvent.basketDelta)
        case "basketState": event = eventProducts(root, signed: false).map(MealzEvent.basketState)
        case "basketTransfer":
            let transferId = identifier(root["transferId"], in: root, key: "transferId", what: "a basketTransfer")
            let products = eventProducts(root, signed: false)
            if let transferId, let products { event = .basketTransfer(products, transferId: transferId) } else { event = nil }
        case "redirectToCart": event = .redirectToCart
        default:
            problem(typeNode, "unknown type \"\(type)\"; use basketDelta, basketState, basketTransfer or redirectToCart")
            event = nil
        }
        guard problems.count == before, let id, let event else { return nil }
        return InboxEvent(id: id, event: event)
    }

    private mutating func eventProducts(_ root: JSONNode, signed: Bool) -> [RetailerProduct]? {
        guard let products = root["products"] else {
            problem(root, "the event has no \"products\" list; add one")
            return nil
        }
        let saved = keys
        keys = CartKeys()
        defer { keys = saved }
        return lines(products, signed: signed)
    }
}
