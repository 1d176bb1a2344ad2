/// Writes compact JSON for the JSON Lines records: one line, every control character escaped,
/// keys in the order written.
package struct JSONWriter {
    package private(set) var bytes: [UInt8] = []

    package init() { bytes.reserveCapacity(256) }

    package mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    package mutating func raw(_ text: String) { bytes.append(contentsOf: text.utf8) }

    package mutating func string(_ text: String) {
        bytes.append(0x22)
        for byte in text.utf8 {
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
        bytes.append(0x22)
    }

    private func hexDigit(_ value: UInt8) -> UInt8 { value < 10 ? 0x30 + value : 0x61 + value - 10 }

    package mutating func integer<T: BinaryInteger>(_ value: T) { raw(String(value)) }

    package mutating func optionalString(_ text: String?) {
        if let text { string(text) } else { raw("null") }
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
        case let .number(text): writer.raw(text)
        case let .bool(flag): writer.raw(flag ? "true" : "false")
        case .null: writer.raw("null")
        }
    }

    /// A node with no source position, for values made here.
    package static func made(_ value: Value) -> JSONNode { JSONNode(value: value, offset: 0) }
}
