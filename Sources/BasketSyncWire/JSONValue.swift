import BasketSync

/// A JSON value with the byte offset where it starts, so that errors can name a line and column.
package struct JSONNode {
    package indirect enum Value {
        case object([(key: String, node: JSONNode)])
        case array([JSONNode])
        case string(String)
        /// The literal text of a number; see ``JSONNode/integer``.
        case number(String)
        case bool(Bool)
        case null
    }

    package var value: Value
    package var offset: Int

    /// The member `key` of an object, if present.
    package subscript(key: String) -> JSONNode? {
        guard case let .object(members) = value else { return nil }
        return members.first { member in member.key.isByteEqual(to: key) }?.node
    }

    /// The number as an exact integer: nil for a non-number, a fraction, an exponent or overflow.
    package var integer: Int? {
        guard case let .number(text) = value, !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) else { return nil }
        return Int(text)
    }

    /// Says what kind of value this is, for error messages.
    package var kind: String {
        switch value {
        case .object: return "an object"
        case .array: return "an array"
        case .string: return "a string"
        case .number: return "a number"
        case .bool: return "a boolean"
        case .null: return "null"
        }
    }
}

/// A problem in a file at a byte offset; turned into `path:line:column: reason` with the file's bytes.
package struct JSONProblem: Error, Equatable {
    package var offset: Int
    package var reason: String

    /// A problem at `offset`.
    package init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }
}

/// Where a byte offset falls in a file: 1-based line and column (columns count characters).
package func lineAndColumn(of offset: Int, in bytes: [UInt8]) -> (line: Int, column: Int) {
    let end = min(offset, bytes.count)
    var line = 1
    var lineStart = 0
    for position in 0..<end where bytes[position] == 0x0A {
        line += 1
        lineStart = position + 1
    }
    // Count characters, not bytes: UTF-8 continuation bytes do not start a column.
    let column = bytes[lineStart..<end].reduce(1) { $1 & 0xC0 == 0x80 ? $0 : $0 + 1 }
    return (line, column)
}

extension JSONNode {
    /// Whether this is JSON `null`.
    package var isNull: Bool {
        if case .null = value { return true }
        return false
    }
}
