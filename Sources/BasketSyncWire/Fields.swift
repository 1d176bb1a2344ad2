import BasketSync

/// The key names of the host's cart format (`products`, `id`, `quantity` by default).
public struct CartKeys: Equatable, Sendable {
    /// The key of the list of lines in a top-level object.
    public var products = "products"
    /// The key of a line's product id.
    public var id = "id"
    /// The key of a line's quantity.
    public var quantity = "quantity"
    /// The key of the highest outbox seq the host has processed.
    public var syncedThrough = "syncedThrough"

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

/// Every problem a document has, in file order; never empty.
package struct DecodingFailure: Error, Equatable {
    /// The problems, sorted by offset.
    package var problems: [JSONProblem]

    /// The first problem in the file.
    package var first: JSONProblem { problems[0] }

    package init(_ problems: [JSONProblem]) {
        self.problems = problems.sorted { $0.offset < $1.offset }
    }
}

/// Reads the fields the formats share (ids, quantities, lists of lines) from parsed JSON,
/// collecting every problem with its position instead of stopping at the first.
struct FieldReader {
    var keys: CartKeys
    var limits: InputLimits
    private(set) var problems: [JSONProblem] = []

    init(keys: CartKeys = CartKeys(), limits: InputLimits) {
        self.keys = keys
        self.limits = limits
    }

    /// Parses `bytes`; a syntax error is the document's one problem.
    static func parse(_ bytes: [UInt8]) throws(DecodingFailure) -> JSONNode {
        do { return try JSONParser.parse(bytes) } catch { throw DecodingFailure([error]) }
    }

    /// The value when no problem was found, else every problem.
    func result<T>(_ value: T?) throws(DecodingFailure) -> T {
        guard problems.isEmpty, let value else { throw DecodingFailure(problems) }
        return value
    }

    mutating func problem(_ node: JSONNode, _ reason: String) {
        problems.append(JSONProblem(offset: node.offset, reason: reason))
    }

    mutating func identifier(_ node: JSONNode?, in parent: JSONNode, key: String, what: String) -> String? {
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
        if let reason = Identifier.problem(text, limits: limits, empty: false, length: false) {
            problem(node, "\"\(key)\" \(reason)")
            return nil
        }
        return text
    }

    mutating func quantity(_ node: JSONNode?, in parent: JSONNode, signed: Bool) -> Int? {
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
            let shown = text.count > 80 ? text.prefix(80) + "…" : text
            problem(node, isWhole ? "\"\(key)\" \(shown) is out of range; the limit is \(limits.maxQuantity)" : "\"\(key)\" \(shown) must be a whole number written in digits alone (no fraction, no exponent: 100, not 1e2 or 100.0)")
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
    mutating func lines(_ node: JSONNode, signed: Bool) -> [RetailerProduct] {
        guard case let .array(elements) = node.value else {
            problem(node, "\"\(keys.products)\" must be an array of lines, not \(node.kind)")
            return []
        }
        var products: [RetailerProduct] = []
        products.reserveCapacity(elements.count)
        var nodes: [JSONNode] = []
        for element in elements {
            guard case .object = element.value else {
                problem(element, "a line must be an object like {\"\(keys.id)\": \"sku-1\", \"\(keys.quantity)\": 2}, not \(element.kind)")
                continue
            }
            let id = identifier(element[keys.id], in: element, key: keys.id, what: "this line")
            let quantity = quantity(element[keys.quantity], in: element, signed: signed)
            if let id, let quantity {
                products.append(RetailerProduct(id: id, quantity: quantity))
                if !signed { nodes.append(element) }
            }
        }
        // An absolute list's lines of one id add up to its quantity: that sum is what the limit bounds.
        if !signed, let past = QuantityLimit.linePastLimit(products, limit: limits.maxQuantity) {
            let line = nodes[past.index]
            problem(line[keys.quantity] ?? line, "\(JSONWriter.quoted(products[past.index].id)) adds up to \(past.sum) over its lines with this one, out of range; the limit is \(limits.maxQuantity) for an id, whatever lines it is on")
        }
        return products
    }
}

/// The limit on a quantity (`limits.maxQuantity`) bounds what an id holds: in an absolute list
/// (a cart, a `basketState`) the sum of its lines.
package enum QuantityLimit {
    /// The first line whose id's lines, up to it, add up past `limit`, and that sum; nil when
    /// every id is within it. Each line must be within it already (0 or more). Ids compared
    /// byte for byte, as the tally does.
    package static func linePastLimit(_ products: [RetailerProduct], limit: Int) -> (index: Int, sum: Int)? {
        // The common case: all lines together within the limit, so is every id.
        var total = 0
        var overflow = false
        for product in products {
            (total, overflow) = total.addingReportingOverflow(product.quantity)
            if overflow || total > limit { break }
        }
        if !overflow, total <= limit { return nil }
        // Then by a 64-bit hash of each id's bytes (FNV-1a) in a table of its own, a few dozen
        // instructions a line (a Dictionary hashes each id with SipHash: a large cart paid
        // milliseconds): ids that share a hash are summed together, so a sum within the limit
        // there is within it for each; one past it is judged exactly, by the ids themselves.
        let capacity = 1 << (Int.bitWidth - max(products.count * 2, 16).leadingZeroBitCount)
        let mask = capacity - 1
        var keys = [UInt64](repeating: 0, count: capacity)
        var sums = [Int](repeating: -1, count: capacity)
        var suspect = false
        for product in products {
            var hash: UInt64 = 0xcbf29ce484222325
            var id = product.id
            id.withUTF8 { bytes in
                for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x100000001b3 }
            }
            var slot = Int(truncatingIfNeeded: hash ^ (hash >> 29)) & mask
            while sums[slot] >= 0, keys[slot] != hash { slot = (slot + 1) & mask }
            keys[slot] = hash
            let sum = max(sums[slot], 0) + product.quantity
            sums[slot] = sum
            if sum > limit { suspect = true; break }
        }
        guard suspect else { return nil }
        var exact: [ExactID: Int] = [:]
        for (index, product) in products.enumerated() {
            let id = ExactID(product.id)
            exact[id, default: 0] += product.quantity
            if let sum = exact[id], sum > limit { return (index, sum) }
        }
        return nil
    }
}

/// The rule every id follows (SKUs, event, transfer, order and store ids), wherever it comes from:
/// a file the agent reads, or a command line (`push`, `set-store`, `handle-payment` check ids as
/// the agent does).
package enum Identifier {
    /// What is wrong with `text` as an id, if anything: empty, longer than the limit, or holding a
    /// C0 or C1 control character or DEL (a line separator could split a record or forge a log line).
    package static func problem(_ text: String, limits: InputLimits, empty: Bool = true, length: Bool = true) -> String? {
        if empty, text.isEmpty { return "is empty; give a non-empty id" }
        if length, text.utf8.count > limits.maxIdBytes { return "is \(text.utf8.count) bytes long, over the limit of \(limits.maxIdBytes)" }
        if text.unicodeScalars.contains(where: isControl) { return "contains a control character; ids are printable text" }
        return nil
    }

    /// C0, DEL and C1.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}
