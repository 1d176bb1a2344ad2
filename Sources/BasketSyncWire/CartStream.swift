import BasketSync
import Glibc

/// The fast path of ``CartFormat/decode(_:keys:limits:)``: one pass over the bytes straight into
/// the cart's lines, with no JSON tree — what a large cart (100,000 lines) needs.
///
/// It takes the carts hosts write: an object (or a bare array) of line objects whose `id` is a
/// string without escapes and whose `quantity` is a whole number within the limits, other fields
/// being scalars. Anything else — an escape in an id or a key, a nested value beside a line's
/// fields, a number it does not expect, any error — makes it give up (nil), and the tree decoder,
/// which says every problem with its place, reads the cart instead. So it never accepts what the
/// tree decoder refuses, nor reads a cart differently (a differential test holds it to that).
package enum CartStream {
    /// The cart, or nil when the tree decoder must read it.
    package static func decode(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits) -> HostCart? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = Reader(bytes: buffer, keys: KeyBytes(keys), limits: limits)
            return reader.cart()
        }
    }

    /// The cart, read knowing the version before (`previous`, what the last read of this cart
    /// kept): a line whose bytes are those of a line of that version, where the lines still
    /// follow each other as they did, is that line, without being parsed again. The cart is what
    /// ``decode(_:keys:limits:)`` reads (a line object's parse depends on its bytes, the keys
    /// and the limits alone), with what the next read needs and the lines that changed: the
    /// lines of `previous` no longer there, the lines that are new (nil without a usable
    /// `previous`). Nil when the tree decoder must read it.
    package static func decode(_ bytes: [UInt8], keys: CartKeys, limits: InputLimits, after previous: CartLayout?) -> (cart: HostCart, layout: CartLayout, change: LineChange?)? {
        guard bytes.count < Int(UInt32.max) else { return nil }
        func read(after previous: Reader.Previous?) -> (cart: HostCart, layout: CartLayout, change: LineChange?)? {
            bytes.withUnsafeBufferPointer { buffer in
                var reader = Reader(bytes: buffer, keys: KeyBytes(keys), limits: limits)
                reader.laysOut = true
                reader.previous = previous
                guard let cart = reader.cart() else { return nil }
                // The lines of the version before after the last one matched are gone.
                if let previous, reader.next < previous.lines.count { reader.change.removed.append(contentsOf: previous.lines[reader.next...]) }
                let layout = CartLayout(bytes: bytes, lines: cart.products, starts: reader.starts, ends: reader.ends, keys: keys, limits: limits)
                return (cart, layout, previous == nil ? nil : reader.change)
            }
        }
        guard let previous, previous.keys == keys, previous.limits == limits else { return read(after: nil) }
        return previous.bytes.withUnsafeBufferPointer { before in
            previous.lines.withUnsafeBufferPointer { lines in
                previous.starts.withUnsafeBufferPointer { starts in
                    previous.ends.withUnsafeBufferPointer { ends in
                        read(after: Reader.Previous(bytes: before, lines: lines, starts: starts, ends: ends))
                    }
                }
            }
        }
    }

    /// What a read of a cart keeps for the next: its bytes, where each line object lies in
    /// them, its lines, and the keys and limits it was read with.
    package struct CartLayout: Sendable {
        /// The bytes read.
        package let bytes: [UInt8]
        /// The lines, in file order.
        package let lines: [RetailerProduct]
        let starts: [UInt32]
        let ends: [UInt32]
        let keys: CartKeys
        let limits: InputLimits
    }

    /// The lines of the version before that are gone, and the lines that are new (a line whose
    /// quantity changed is one of each).
    package struct LineChange: Sendable {
        /// Lines of the version before no longer in the cart.
        package var removed: [RetailerProduct] = []
        /// Lines not in the version before, or not where they were.
        package var added: [RetailerProduct] = []
    }

    /// The key names as bytes, compared without making strings.
    struct KeyBytes {
        let products: [UInt8]
        let id: [UInt8]
        let quantity: [UInt8]
        let syncedThrough: [UInt8]

        init(_ keys: CartKeys) {
            products = Array(keys.products.utf8)
            id = Array(keys.id.utf8)
            quantity = Array(keys.quantity.utf8)
            syncedThrough = Array(keys.syncedThrough.utf8)
        }
    }

    struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        let keys: KeyBytes
        let limits: InputLimits
        var index = 0
        /// Whether the read notes where each line lies (``CartLayout``).
        var laysOut = false
        var starts: [UInt32] = []
        var ends: [UInt32] = []
        /// The version before, when the read goes by it.
        var previous: Previous?
        /// The next line of the version before not yet matched or passed.
        var next = 0
        var change = LineChange()

        /// The version before, as the read looks at it (no reference counted on each line).
        struct Previous {
            let bytes: UnsafeBufferPointer<UInt8>
            let lines: UnsafeBufferPointer<RetailerProduct>
            let starts: UnsafeBufferPointer<UInt32>
            let ends: UnsafeBufferPointer<UInt32>
        }

        /// How many lines of the version before are looked at past the next one for the line at
        /// `index` (a line removed, or a few), before it is read as a new line.
        static let lookahead = 8

        /// The line of the version before whose bytes are those at `index`, taken as it was: the
        /// next one, or one of the few after it (those passed are gone). Nil when none is.
        mutating func matchedLine() -> RetailerProduct? {
            guard let previous else { return nil }
            let last = min(previous.lines.count, next + 1 + Self.lookahead)
            var candidate = next
            while candidate < last {
                let start = Int(previous.starts[candidate])
                let count = Int(previous.ends[candidate]) - start
                if index + count <= bytes.count, memcmp(bytes.baseAddress! + index, previous.bytes.baseAddress! + start, count) == 0 {
                    if candidate > next { change.removed.append(contentsOf: previous.lines[next..<candidate]) }
                    next = candidate + 1
                    starts.append(UInt32(index))
                    index += count
                    ends.append(UInt32(index))
                    return previous.lines[candidate]
                }
                candidate += 1
            }
            return nil
        }

        init(bytes: UnsafeBufferPointer<UInt8>, keys: KeyBytes, limits: InputLimits) {
            self.bytes = bytes
            self.keys = keys
            self.limits = limits
            // A byte-order mark is skipped, as the tree parser does.
            if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { index = 3 }
        }

        mutating func cart() -> HostCart? {
            skipSpace()
            var cart = HostCart(products: [], syncedThrough: nil)
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: "[") {
                guard let products = lines() else { return nil }
                cart.products = products
            } else {
                guard bytes[index] == UInt8(ascii: "{") else { return nil }
                index += 1
                var seen: [Range<Int>] = []
                var sawProducts = false
                skipSpace()
                if peek(UInt8(ascii: "}")) { return nil }  // no products: the tree decoder says so
                while true {
                    skipSpace()
                    guard let key = plainString(), !isDuplicate(key, in: &seen), colon() else { return nil }
                    skipSpace()
                    if same(key, keys.products) {
                        guard let products = lines() else { return nil }
                        cart.products = products
                        sawProducts = true
                    } else if same(key, keys.syncedThrough) {
                        if literal("null") {
                            cart.syncedThrough = nil
                        } else {
                            guard let value = wholeNumber(), value >= 0, UInt64(value) <= SyncState.largestSeq else { return nil }
                            cart.syncedThrough = UInt64(value)
                        }
                    } else {
                        guard skipScalar() else { return nil }
                    }
                    skipSpace()
                    if peek(UInt8(ascii: ",")) { index += 1; continue }
                    guard peek(UInt8(ascii: "}")) else { return nil }
                    index += 1
                    break
                }
                guard sawProducts else { return nil }
            }
            skipSpace()
            // An id past the limit over its lines: the tree parser says where.
            guard QuantityLimit.linePastLimit(cart.products, limit: limits.maxQuantity) == nil else { return nil }
            return index == bytes.count ? cart : nil
        }

        /// The array of line objects.
        mutating func lines() -> [RetailerProduct]? {
            guard peek(UInt8(ascii: "[")) else { return nil }
            index += 1
            var products: [RetailerProduct] = []
            products.reserveCapacity(bytes.count / 32)
            if laysOut {
                starts.reserveCapacity(bytes.count / 32)
                ends.reserveCapacity(bytes.count / 32)
            }
            skipSpace()
            if peek(UInt8(ascii: "]")) {
                index += 1
                return products
            }
            while true {
                skipSpace()
                if laysOut {
                    if let same = matchedLine() {
                        products.append(same)
                    } else {
                        let start = index
                        guard let product = line() else { return nil }
                        products.append(product)
                        starts.append(UInt32(start))
                        ends.append(UInt32(index))
                        if previous != nil { change.added.append(product) }
                    }
                } else {
                    guard let product = line() else { return nil }
                    products.append(product)
                }
                skipSpace()
                if peek(UInt8(ascii: ",")) { index += 1; continue }
                guard peek(UInt8(ascii: "]")) else { return nil }
                index += 1
                return products
            }
        }

        /// One line: its id and quantity, other fields scalars.
        mutating func line() -> RetailerProduct? {
            guard peek(UInt8(ascii: "{")) else { return nil }
            index += 1
            var id: String?
            var quantity: Int?
            // The other keys, for duplicates: made only for a line that has some.
            var seen: [Range<Int>]?
            skipSpace()
            guard !peek(UInt8(ascii: "}")) else { return nil }
            while true {
                skipSpace()
                guard let key = plainString(), colon() else { return nil }
                skipSpace()
                if same(key, keys.id) {
                    guard id == nil else { return nil }
                    guard let range = plainString(), !range.isEmpty, range.count <= limits.maxIdBytes else { return nil }
                    let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
                    // Plain ASCII past the controls needs no more checks; anything else asks.
                    if !isPrintableASCII(range), Identifier.problem(text, limits: limits) != nil { return nil }
                    id = text
                } else if same(key, keys.quantity) {
                    guard quantity == nil, let value = wholeNumber(), value >= 0, value <= limits.maxQuantity else { return nil }
                    quantity = value
                } else {
                    var others = seen ?? []
                    guard !isDuplicate(key, in: &others), skipScalar() else { return nil }
                    seen = others
                }
                skipSpace()
                if peek(UInt8(ascii: ",")) { index += 1; continue }
                guard peek(UInt8(ascii: "}")) else { return nil }
                index += 1
                break
            }
            guard let id, let quantity else { return nil }
            return RetailerProduct(id: id, quantity: quantity)
        }

        // MARK: Tokens

        func peek(_ byte: UInt8) -> Bool { index < bytes.count && bytes[index] == byte }

        mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        mutating func colon() -> Bool {
            skipSpace()
            guard peek(UInt8(ascii: ":")) else { return false }
            index += 1
            return true
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let count = word.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return false }
            index += count
            return true
        }

        /// A string without escapes or control characters, in valid UTF-8: the range of its
        /// content. Nil for anything else (the tree decoder reads those).
        mutating func plainString() -> Range<Int>? {
            guard peek(UInt8(ascii: "\"")) else { return nil }
            let start = index + 1
            var position = start
            var ascii = true
            while position < bytes.count {
                let byte = bytes[position]
                if byte == UInt8(ascii: "\"") {
                    index = position + 1
                    let range = start..<position
                    if !ascii, String(validating: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self) == nil { return nil }
                    return range
                }
                if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
                if byte >= 0x80 { ascii = false }
                position += 1
            }
            return nil
        }

        func isPrintableASCII(_ range: Range<Int>) -> Bool {
            for position in range where bytes[position] < 0x20 || bytes[position] >= 0x7F { return false }
            return true
        }

        func same(_ range: Range<Int>, _ key: [UInt8]) -> Bool {
            guard range.count == key.count else { return false }
            var position = range.lowerBound
            for byte in key {
                if bytes[position] != byte { return false }
                position += 1
            }
            return true
        }

        /// Whether `key` was seen in this object (byte for byte: keys here have no escapes).
        func isDuplicate(_ key: Range<Int>, in seen: inout [Range<Int>]) -> Bool {
            for other in seen where other.count == key.count {
                if bytes[other].elementsEqual(bytes[key]) { return true }
            }
            seen.append(key)
            return false
        }

        /// `-?(0|[1-9][0-9]*)` up to 18 digits; nil for a fraction, an exponent or anything longer.
        mutating func wholeNumber() -> Int? {
            var position = index
            let negative = position < bytes.count && bytes[position] == UInt8(ascii: "-")
            if negative { position += 1 }
            let first = position
            var value = 0
            while position < bytes.count, (0x30...0x39).contains(bytes[position]) {
                if position - first == 18 { return nil }  // a 19th digit could overflow
                value = value * 10 + Int(bytes[position] - 0x30)
                position += 1
            }
            let digits = position - first
            guard digits > 0, !(digits > 1 && bytes[first] == 0x30) else { return nil }
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") || bytes[position] | 0x20 == UInt8(ascii: "e") { return nil }
            index = position
            return negative ? -value : value
        }

        /// A string, a number, true, false or null, checked as JSON; a nested value gives up.
        mutating func skipScalar() -> Bool {
            guard index < bytes.count else { return false }
            switch bytes[index] {
            case UInt8(ascii: "\""): return plainString() != nil
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            case UInt8(ascii: "-"), 0x30...0x39: return skipNumber()
            default: return false
            }
        }

        /// A JSON number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, at most 64 bytes.
        mutating func skipNumber() -> Bool {
            var position = index
            func digits() -> Int {
                let start = position
                while position < bytes.count, (0x30...0x39).contains(bytes[position]) { position += 1 }
                return position - start
            }
            if bytes[position] == UInt8(ascii: "-") { position += 1 }
            let first = position
            let whole = digits()
            guard whole > 0, !(whole > 1 && bytes[first] == 0x30) else { return false }
            if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
                position += 1
                guard digits() > 0 else { return false }
            }
            if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
                position += 1
                if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
                guard digits() > 0 else { return false }
            }
            guard position - index <= 64 else { return false }
            index = position
            return true
        }
    }
}
