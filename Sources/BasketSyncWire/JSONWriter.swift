import BasketSync

/// Writes compact JSON for the JSON Lines records: one line, every control character escaped,
/// keys in the order written.
package struct JSONWriter {
    package private(set) var bytes: [UInt8] = []

    package init() { bytes.reserveCapacity(256) }

    package mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Bytes made at run time, as they are (a literal goes to the `StaticString` overload: given
    /// this one, every `"{"` would be a `String` made and copied).
    package mutating func raw(text: String) {
        // From the string's own bytes at once (its UTF-8 view is copied a byte at a time).
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// A string, escaped so that it is one line for any line splitter: C0 controls, DEL, and the
    /// line separators other splitters honour (U+0085, U+2028, U+2029) are written as `\uXXXX`.
    package mutating func string(_ text: String) {
        // The common case (an id, a key, a date): printable ASCII with nothing to escape, copied
        // at once from the string's own bytes.
        var text = text
        let plain = text.withUTF8 { (utf8: UnsafeBufferPointer<UInt8>) -> Bool in
            for byte in utf8 where byte < 0x20 || byte > 0x7E || byte == 0x22 || byte == 0x5C { return false }
            bytes.append(0x22)
            bytes.append(contentsOf: utf8)
            bytes.append(0x22)
            return true
        }
        if !plain { escaped(text) }
    }

    /// ``string(_:)`` for a text with something to escape, byte by byte.
    private mutating func escaped(_ text: String) {
        bytes.append(0x22)
        // A lead byte held back until its sequence shows whether it is U+0085 (C2 85), U+2028
        // (E2 80 A8) or U+2029 (E2 80 A9); a String is valid UTF-8, so continuation bytes follow.
        var held: [UInt8] = []
        for byte in text.utf8 {
            if !held.isEmpty {
                held.append(byte)
                if held == [0xC2, 0x85] { raw("\\u0085"); held = []; continue }
                if held == [0xE2, 0x80] { continue }
                if held == [0xE2, 0x80, 0xA8] { raw("\\u2028"); held = []; continue }
                if held == [0xE2, 0x80, 0xA9] { raw("\\u2029"); held = []; continue }
                bytes.append(contentsOf: held)
                held = []
                continue
            }
            if byte == 0xC2 || byte == 0xE2 {
                held = [byte]
                continue
            }
            switch byte {
            case 0x22: raw("\\\"")
            case 0x5C: raw("\\\\")
            case 0x0A: raw("\\n")
            case 0x0D: raw("\\r")
            case 0x09: raw("\\t")
            case 0..<0x20, 0x7F:
                raw("\\u00")
                bytes.append(hexDigit(byte >> 4))
                bytes.append(hexDigit(byte & 0xF))
            default: bytes.append(byte)
            }
        }
        bytes.append(contentsOf: held)
        bytes.append(0x22)
    }

    private func hexDigit(_ value: UInt8) -> UInt8 { value < 10 ? 0x30 + value : 0x61 + value - 10 }

    package mutating func integer<T: BinaryInteger>(_ value: T) {
        guard let magnitude = UInt64(exactly: value.magnitude) else { return raw(text: String(value)) }
        digits(magnitude, negative: value < 0)
    }

    /// ``integer(_:)`` for the integers written most (no generic code across modules).
    package mutating func integer(_ value: Int) { digits(UInt64(value.magnitude), negative: value < 0) }

    /// ``integer(_:)`` for a signed 64-bit integer.
    package mutating func integer(_ value: Int64) { digits(value.magnitude, negative: value < 0) }

    /// ``integer(_:)`` for an unsigned 64-bit integer.
    package mutating func integer(_ value: UInt64) { digits(value, negative: false) }

    /// The digits of `magnitude`, after a `-` when `negative`, written in place (a String made
    /// for each number cost more than the rest).
    private mutating func digits(_ magnitude: UInt64, negative: Bool) {
        if negative { bytes.append(0x2D) }
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        var count = 0
        var rest = magnitude
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[count] = UInt8(truncatingIfNeeded: rest % 10) + 0x30
                rest /= 10
                count += 1
            } while rest > 0
            for index in stride(from: count - 1, through: 0, by: -1) { bytes.append(buffer[index]) }
        }
    }

    package mutating func optionalString(_ text: String?) {
        if let text { string(text) } else { raw("null") }
    }

    /// Writes one object: `body` writes its members, in order.
    package mutating func object(_ body: (inout JSONObjectWriter) -> Void) {
        raw("{")
        var object = JSONObjectWriter(writer: self)
        bytes = []  // the object writer now owns the only reference: appends never copy
        body(&object)
        object.writer.raw("}")
        self = object.writer
    }

    /// Writes one array: `body` writes each element of `elements`.
    package mutating func array<C: Collection>(_ elements: C, _ body: (inout JSONWriter, C.Element) -> Void) {
        raw("[")
        for (index, element) in elements.enumerated() {
            if index > 0 { raw(",") }
            body(&self, element)
        }
        raw("]")
    }

    /// A list of lines with the default key names: `[{"id":"sku-1","quantity":2}]`.
    package mutating func products(_ products: [RetailerProduct]) {
        array(products) { writer, product in
            writer.object { line in
                line.member("id", product.id)
                line.member("quantity", product.quantity)
            }
        }
    }

    /// `text` as a JSON string, escaped and cut to `limit` characters: how an error message quotes
    /// input, so that nothing the host or the Mealz side wrote reaches a log line raw or unbounded.
    package static func quoted(_ text: String, limit: Int = 80) -> String {
        var writer = JSONWriter()
        let cut = text.count > limit ? String(text.prefix(limit)) : text
        writer.string(cut)
        return writer.text + (cut.count < text.count ? "…" : "")
    }

    /// `text` cut to `limit` characters, "…" after a cut: how an error message names input
    /// without quotes (a value, a path, a command), never unbounded (docs/spec.md §7).
    package static func cut(_ text: some StringProtocol, limit: Int = 80) -> String {
        text.count > limit ? String(text.prefix(limit)) + "…" : String(text)
    }

    /// `text` for a line meant for people: every control character (C0, DEL, C1), format
    /// character (the bidirectional overrides and isolates, zero-width marks: Unicode's Cf) and
    /// line or paragraph separator written as an escape, so that nothing in it can end the line,
    /// forge the next one, or show it in another order than it is ("r\u{202e}gpj.exe").
    package static func printable(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where needsEscape(scalar):
                result += "\\u{" + String(scalar.value, radix: 16) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Whether a line meant for people shows `scalar` as an escape (see ``printable(_:)``).
    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.value < 0x80 { return Identifier.isControl(scalar) }
        switch scalar.properties.generalCategory {
        case .control, .format, .lineSeparator, .paragraphSeparator: return true
        default: return false
        }
    }

    /// The text written so far, for outputs that are strings.
    package var text: String { String(decoding: bytes, as: UTF8.self) }
}

/// Writes the members of one object, commas included; see ``JSONWriter/object(_:)``.
package struct JSONObjectWriter {
    fileprivate var writer: JSONWriter
    private var isFirst = true

    fileprivate init(writer: JSONWriter) { self.writer = writer }

    private mutating func open(_ key: StaticString) {
        writer.raw(isFirst ? "\"" as StaticString : ",\"")
        isFirst = false
        writer.raw(key)
        writer.raw("\":")
    }

    /// `"key": value`, with a value written by `body`.
    package mutating func member(_ key: StaticString, _ body: (inout JSONWriter) -> Void) {
        open(key)
        body(&writer)
    }

    /// `"key": "text"`.
    package mutating func member(_ key: StaticString, _ text: String) { member(key) { $0.string(text) } }

    /// `"key": "text"`, or `"key": null`.
    package mutating func member(_ key: StaticString, _ text: String?) { member(key) { $0.optionalString(text) } }

    /// `"key": 17`.
    package mutating func member<T: BinaryInteger>(_ key: StaticString, _ value: T) { member(key) { $0.integer(value) } }

    /// `"key": 17`, or `"key": null`.
    package mutating func member<T: BinaryInteger>(_ key: StaticString, _ value: T?) {
        member(key) { writer in if let value { writer.integer(value) } else { writer.raw("null") } }
    }

    /// `"key": true`.
    package mutating func member(_ key: StaticString, _ flag: Bool) { member(key) { $0.raw(flag ? "true" as StaticString : "false") } }

    /// `"key": [lines]`, with the default key names.
    package mutating func member(_ key: StaticString, products: [RetailerProduct]) { member(key) { $0.products(products) } }

    /// `"name": value` for a key that is data (a SKU, an order id).
    package mutating func member(named name: String, _ body: (inout JSONWriter) -> Void) {
        writer.raw(isFirst ? "" as StaticString : ",")
        isFirst = false
        writer.string(name)
        writer.raw(":")
        body(&writer)
    }
}

extension JSONNode {
    /// Writes the value back as compact JSON, keys in their order, numbers as written.
    package func write(into writer: inout JSONWriter) {
        switch value {
        case let .object(members):
            writer.raw("{")
            for (index, member) in members.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(member.key)
                writer.raw(":")
                member.node.write(into: &writer)
            }
            writer.raw("}")
        case let .array(elements):
            writer.raw("[")
            for (index, element) in elements.enumerated() {
                if index > 0 { writer.raw(",") }
                element.write(into: &writer)
            }
            writer.raw("]")
        case let .string(text): writer.string(text)
        case let .number(text): writer.raw(text: text)
        case let .bool(flag): writer.raw(flag ? "true" : "false")
        case .null: writer.raw("null")
        }
    }

    /// A node with no source position, for values made here.
    package static func made(_ value: Value) -> JSONNode { JSONNode(value: value, offset: 0) }
}
