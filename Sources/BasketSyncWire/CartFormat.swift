import BasketSync

/// A cart as the host wrote it.
package struct HostCart: Equatable, Sendable {
    /// Every line, in file order (the same id twice is two lines here; the library adds them up).
    package var products: [RetailerProduct]
    /// The highest outbox seq the host has processed, when it says so.
    package var syncedThrough: UInt64?

    package init(products: [RetailerProduct], syncedThrough: UInt64?) {
        self.products = products
        self.syncedThrough = syncedThrough
    }
}

/// `cart.json`: `{"products": [{"id": "sku-1", "quantity": 2}], "syncedThrough": 17}` or a bare
/// array of lines, with the host's own key names. The host writes it; `apply` edits it in place
/// of the host, keeping every other line and field as it is.
package enum CartFormat {
    /// Parses and validates a cart; every problem is reported, with its position.
    package static func decode(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits) throws(DecodingFailure) -> HostCart {
        try CartDocument(bytes, keys: keys, limits: limits).cart
    }

    /// A cart file for `cart`, as a host would write it (one product line per line).
    package static func encode(_ cart: HostCart, keys: CartKeys) -> [UInt8] {
        var members: [(key: String, node: JSONNode)] = [(keys.products, .made(.array(cart.products.map { line(for: $0, keys: keys) })))]
        if let synced = cart.syncedThrough { members.append((keys.syncedThrough, .made(.number(String(synced))))) }
        return encode(.made(.object(members)), keys: keys)
    }

    /// Reads the cart out of a parsed document.
    fileprivate static func read(_ root: JSONNode, _ fields: inout FieldReader) -> HostCart? {
        let keys = fields.keys
        var cart = HostCart(products: [], syncedThrough: nil)
        switch root.value {
        case .array:
            cart.products = fields.lines(root, signed: false)
        case .object:
            guard let products = root[keys.products] else {
                fields.problem(root, "the cart has no \"\(keys.products)\" list; write {\"\(keys.products)\": [...]} or a bare array")
                return nil
            }
            cart.products = fields.lines(products, signed: false)
            if let synced = root[keys.syncedThrough], case .null = synced.value {
                cart.syncedThrough = nil
            } else if let synced = root[keys.syncedThrough] {
                if let value = synced.integer, value >= 0 {
                    cart.syncedThrough = UInt64(value)
                } else {
                    fields.problem(synced, "\"\(keys.syncedThrough)\" must be the highest outbox seq processed, a whole number 0 or more")
                }
            }
        default:
            fields.problem(root, "a cart must be an object with \"\(keys.products)\" or an array of lines, not \(root.kind)")
        }
        return cart
    }

    fileprivate static func line(for product: RetailerProduct, keys: CartKeys) -> JSONNode {
        .made(.object([(keys.id, .made(.string(product.id))), (keys.quantity, .made(.number(String(product.quantity))))]))
    }

    /// A cart document written back for people: one member per line, one product line per line.
    fileprivate static func encode(_ root: JSONNode, keys: CartKeys) -> [UInt8] {
        var writer = JSONWriter()
        guard case let .object(members) = root.value else {
            root.write(into: &writer)
            writer.raw("\n")
            return writer.bytes
        }
        writer.raw("{\n")
        for (index, member) in members.enumerated() {
            writer.raw("  ")
            writer.string(member.key)
            writer.raw(": ")
            if member.key == keys.products, case let .array(lines) = member.node.value, !lines.isEmpty {
                writer.raw("[\n")
                for (lineIndex, line) in lines.enumerated() {
                    writer.raw("    ")
                    line.write(into: &writer)
                    writer.raw(lineIndex == lines.count - 1 ? "\n" : ",\n")
                }
                writer.raw("  ]")
            } else {
                member.node.write(into: &writer)
            }
            writer.raw(index == members.count - 1 ? "\n" : ",\n")
        }
        writer.raw("}\n")
        return writer.bytes
    }
}

/// A cart file as a document: its cart, and the edits `apply` makes as the reference host —
/// deltas applied by ``RetailerProduct/applying(delta:to:)``, the new `syncedThrough` — written
/// back with every other line and field as it was.
package struct CartDocument {
    /// The cart as read, before any edit.
    package let cart: HostCart
    private var root: JSONNode
    private let keys: CartKeys

    /// Parses and validates a cart file.
    package init(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits) throws(DecodingFailure) {
        let root = try FieldReader.parse(bytes)
        var fields = FieldReader(keys: keys, limits: limits)
        let cart = CartFormat.read(root, &fields)
        self.cart = try fields.result(cart)
        self.root = root
        self.keys = keys
    }

    /// Applies one signed delta: the same id on several lines counts as one line (kept on the
    /// first), the result is clamped at 0, a line that reaches 0 is removed, a new id gets a new line.
    package mutating func apply(_ delta: RetailerProduct) {
        var lines = productLines
        let matching = lines.indices.filter { index in
            if case let .string(id) = lines[index][keys.id]?.value { return id == delta.id }
            return false
        }
        // The cart was validated: every quantity is 0 or more, so the rule sums them too.
        let total = matching.reduce(0) { RetailerProduct.applying(delta: lines[$1][keys.quantity]?.integer ?? 0, to: $0) }
        let quantity = RetailerProduct.applying(delta: delta.quantity, to: total)
        if let first = matching.first, quantity > 0, case var .object(members) = lines[first].value {
            if let index = members.firstIndex(where: { $0.key == keys.quantity }) {
                members[index].node = .made(.number(String(quantity)))
            }
            lines[first] = .made(.object(members))
            for index in matching.dropFirst().reversed() { lines.remove(at: index) }
        } else {
            for index in matching.reversed() { lines.remove(at: index) }
            if quantity > 0 { lines.append(CartFormat.line(for: RetailerProduct(id: delta.id, quantity: quantity), keys: keys)) }
        }
        productLines = lines
    }

    /// Sets the highest outbox seq processed (a bare array becomes an object to hold it).
    package mutating func setSyncedThrough(_ seq: UInt64) {
        var members = objectMembers
        let synced = JSONNode.made(.number(String(seq)))
        if let index = members.firstIndex(where: { $0.key == keys.syncedThrough }) {
            members[index].node = synced
        } else {
            members.append((keys.syncedThrough, synced))
        }
        root = .made(.object(members))
    }

    /// The document as it is now, written back for people.
    package func encoded() -> [UInt8] { CartFormat.encode(root, keys: keys) }

    /// The members of the top-level object; a bare array is the value of the products key.
    private var objectMembers: [(key: String, node: JSONNode)] {
        switch root.value {
        case let .object(members): return members
        default: return [(keys.products, root)]
        }
    }

    private var productLines: [JSONNode] {
        get {
            guard let node = objectMembers.first(where: { $0.key == keys.products })?.node,
                  case let .array(lines) = node.value else { return [] }
            return lines
        }
        set {
            var members = objectMembers
            let node = JSONNode.made(.array(newValue))
            if let index = members.firstIndex(where: { $0.key == keys.products }) { members[index].node = node } else { members.append((keys.products, node)) }
            root = .made(.object(members))
        }
    }
}
