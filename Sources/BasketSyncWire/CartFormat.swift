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
    /// The common shape is read in one pass (``CartStream``); anything else by the tree decoder.
    package static func decode(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits) throws(DecodingFailure) -> HostCart {
        if let cart = CartStream.decode(bytes, keys: keys, limits: limits) { return cart }
        return try CartDocument(bytes, keys: keys, limits: limits).cart
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
                if let value = synced.integer, value >= 0, UInt64(value) <= SyncState.largestSeq {
                    cart.syncedThrough = UInt64(value)
                } else {
                    fields.problem(synced, "\"\(keys.syncedThrough)\" must be the highest outbox seq processed, a whole number from 0 to \(SyncState.largestSeq)")
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
            if member.key.isByteEqual(to: keys.products), case let .array(lines) = member.node.value, !lines.isEmpty {
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
///
/// The product lines are kept apart with an index by id, so that applying a record costs its own
/// lines, not the size of the cart.
package struct CartDocument {
    /// The cart as read, before any edit.
    package let cart: HostCart
    private let keys: CartKeys
    /// The highest quantity a line may hold (`limits.maxQuantity`): `apply` clamps there.
    private let maxQuantity: Int
    /// The ids `apply` clamped at `maxQuantity`, in order, once each.
    package private(set) var clampedAtLimit: [String] = []
    /// The top-level members; the products key's value is rebuilt from `lines` when written.
    private var members: [(key: String, node: JSONNode)]
    /// The product lines; nil where `apply` removed one.
    private var lines: [JSONNode?]
    /// Where each id's lines are.
    private var index: [ExactID: [Int]] = [:]

    /// Parses and validates a cart file.
    package init(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits) throws(DecodingFailure) {
        let root = try FieldReader.parse(bytes)
        var fields = FieldReader(keys: keys, limits: limits)
        let cart = CartFormat.read(root, &fields)
        self.cart = try fields.result(cart)
        self.keys = keys
        self.maxQuantity = limits.maxQuantity
        switch root.value {
        case let .object(objectMembers): members = objectMembers
        default: members = [(keys.products, root)]  // a bare array becomes an object, with room for syncedThrough
        }
        if case let .array(elements)? = members.first(where: { $0.key.isByteEqual(to: keys.products) })?.node.value {
            lines = elements
        } else {
            lines = []
        }
        for (position, line) in lines.enumerated() {
            if case let .string(id)? = line?[keys.id]?.value { index[ExactID(id), default: []].append(position) }
        }
    }

    /// Applies one signed delta. The same id on several lines adds up: the delta moves that sum,
    /// clamped at 0 and at `maxQuantity`, and lands on the lines as little as it can — an
    /// increase on the first line, a decrease taken from the last line back; a line brought to 0
    /// is removed, every other line (and its fields) stays as it is. A new id gets a new line.
    package mutating func apply(_ delta: RetailerProduct) {
        let id = ExactID(delta.id)
        let matching = index[id] ?? []
        // The cart was validated: every quantity is 0 or more, so the rule sums them too.
        let quantities = matching.map { lines[$0]?[keys.quantity]?.integer ?? 0 }
        let total = quantities.reduce(0) { RetailerProduct.applying(delta: $1, to: $0) }
        var quantity = RetailerProduct.applying(delta: delta.quantity, to: total)
        // Never past the limit: a cart basket-sync would reject would stop every later apply.
        if quantity > maxQuantity {
            quantity = maxQuantity
            if !clampedAtLimit.contains(delta.id) { clampedAtLimit.append(delta.id) }
        }
        guard !matching.isEmpty else {
            if quantity > 0 {
                index[id] = [lines.count]
                lines.append(CartFormat.line(for: RetailerProduct(id: delta.id, quantity: quantity), keys: keys))
            }
            return
        }
        var wanted = quantities
        if quantity > total {
            wanted[0] += quantity - total  // at most quantity: the first line is part of the total
        } else {
            var left = total - quantity
            for position in wanted.indices.reversed() where left > 0 {
                let taken = min(wanted[position], left)
                wanted[position] -= taken
                left -= taken
            }
        }
        for (position, line) in matching.enumerated() where wanted[position] != quantities[position] {
            guard wanted[position] > 0 else {
                lines[line] = nil
                continue
            }
            if case var .object(lineMembers)? = lines[line]?.value,
               let member = lineMembers.firstIndex(where: { $0.key.isByteEqual(to: keys.quantity) }) {
                lineMembers[member].node = .made(.number(String(wanted[position])))
                lines[line] = .made(.object(lineMembers))
            }
        }
        index[id] = matching.filter { lines[$0] != nil }
    }

    /// Sets the highest outbox seq processed.
    package mutating func setSyncedThrough(_ seq: UInt64) {
        let synced = JSONNode.made(.number(String(seq)))
        if let position = members.firstIndex(where: { $0.key.isByteEqual(to: keys.syncedThrough) }) {
            members[position].node = synced
        } else {
            members.append((keys.syncedThrough, synced))
        }
    }

    /// The document as it is now, written back for people.
    package func encoded() -> [UInt8] {
        var written = members
        let products = JSONNode.made(.array(lines.compactMap { $0 }))
        if let position = written.firstIndex(where: { $0.key.isByteEqual(to: keys.products) }) {
            written[position].node = products
        } else {
            written.append((keys.products, products))
        }
        return CartFormat.encode(.made(.object(written)), keys: keys)
    }
}
