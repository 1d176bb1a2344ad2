import BasketSync

/// A strict JSON parser (RFC 8259) that keeps positions and refuses what hostile input brings:
/// invalid UTF-8, control characters in strings, lone surrogates, duplicate keys, nesting deeper
/// than a limit. A leading UTF-8 byte order mark is skipped; `//` comments are allowed on request
/// (for the configuration file).
package struct JSONParser {
    private let bytes: [UInt8]
    private var index: Int
    private let maximumDepth: Int
    private let allowComments: Bool

    package static func parse(_ bytes: [UInt8], maximumDepth: Int = 64, allowComments: Bool = false) throws(JSONProblem) -> JSONNode {
        var parser = JSONParser(bytes: bytes, maximumDepth: maximumDepth, allowComments: allowComments)
        return try parser.document()
    }

    private init(bytes: [UInt8], maximumDepth: Int, allowComments: Bool) {
        self.bytes = bytes
        self.index = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        self.maximumDepth = maximumDepth
        self.allowComments = allowComments
    }

    private mutating func document() throws(JSONProblem) -> JSONNode {
        try skipSpace()
        guard index < bytes.count else { throw JSONProblem(offset: index, reason: "the file is empty; it must hold one JSON value") }
        let node = try value(depth: 0)
        try skipSpace()
        if index < bytes.count { throw JSONProblem(offset: index, reason: "unexpected \(describe(index)) after the JSON value") }
        return node
    }

    private mutating func skipSpace() throws(JSONProblem) {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            case UInt8(ascii: "/") where allowComments && index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "/"):
                while index < bytes.count && bytes[index] != 0x0A { index += 1 }
            default: return
            }
        }
    }

    private func describe(_ at: Int) -> String {
        guard at < bytes.count else { return "end of file" }
        let byte = bytes[at]
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }

    private mutating func value(depth: Int) throws(JSONProblem) -> JSONNode {
        guard depth < maximumDepth else {
            throw JSONProblem(offset: index, reason: "nesting deeper than \(maximumDepth) levels")
        }
        let start = index
        guard index < bytes.count else { throw JSONProblem(offset: index, reason: "the file ends in the middle of a value") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return JSONNode(value: try object(depth: depth), offset: start)
        case UInt8(ascii: "["): return JSONNode(value: try array(depth: depth), offset: start)
        case UInt8(ascii: "\""): return JSONNode(value: .string(try string()), offset: start)
        case UInt8(ascii: "t"): try literal("true"); return JSONNode(value: .bool(true), offset: start)
        case UInt8(ascii: "f"): try literal("false"); return JSONNode(value: .bool(false), offset: start)
        case UInt8(ascii: "n"): try literal("null"); return JSONNode(value: .null, offset: start)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return JSONNode(value: .number(try number()), offset: start)
        default: throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected a JSON value")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONProblem) {
        let text = UnsafeRawBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
        guard bytes.count - index >= text.count, bytes[index..<index + text.count].elementsEqual(text) else {
            throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected a JSON value")
        }
        index += text.count
    }

    private mutating func object(depth: Int) throws(JSONProblem) -> JSONNode.Value {
        index += 1
        var members: [(key: String, node: JSONNode)] = []
        // Objects are small (a cart line has two or three keys): a linear search finds a duplicate
        // faster than hashing; a set takes over for large ones.
        var keys: Set<ExactID>?
        try skipSpace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            try skipSpace()
            let keyOffset = index
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected a key in double quotes")
            }
            let key = try string()
            let duplicate: Bool
            if keys != nil {
                duplicate = !keys!.insert(ExactID(key)).inserted
            } else {
                // Keys compare byte for byte, like ids: `é` and `e\u{301}` are two keys.
                duplicate = members.contains { member in member.key.isByteEqual(to: key) }
                if members.count == 16 { keys = Set((members.map(\.key) + [key]).map { ExactID($0) }) }
            }
            guard !duplicate else {
                throw JSONProblem(offset: keyOffset, reason: "duplicate key \"\(key)\"; keep one")
            }
            try skipSpace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else {
                throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected ':' after the key")
            }
            index += 1
            try skipSpace()
            members.append((key, try value(depth: depth + 1)))
            try skipSpace()
            guard index < bytes.count else { throw JSONProblem(offset: index, reason: "the file ends inside an object; expected '}'") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected ',' or '}'")
        }
    }

    private mutating func array(depth: Int) throws(JSONProblem) -> JSONNode.Value {
        index += 1
        var elements: [JSONNode] = []
        try skipSpace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
        while true {
            try skipSpace()
            elements.append(try value(depth: depth + 1))
            try skipSpace()
            guard index < bytes.count else { throw JSONProblem(offset: index, reason: "the file ends inside an array; expected ']'") }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
            throw JSONProblem(offset: index, reason: "unexpected \(describe(index)); expected ',' or ']'")
        }
    }

    private mutating func number() throws(JSONProblem) -> String {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        func digits(_ parser: inout JSONParser) -> Int {
            let from = parser.index
            while parser.index < parser.bytes.count, (0x30...0x39).contains(parser.bytes[parser.index]) { parser.index += 1 }
            return parser.index - from
        }
        let integerStart = index
        let integerDigits = digits(&self)
        guard integerDigits > 0 else { throw JSONProblem(offset: index, reason: "a number needs digits after '-'") }
        if integerDigits > 1 && bytes[integerStart] == UInt8(ascii: "0") {
            throw JSONProblem(offset: integerStart, reason: "a number cannot start with 0")
        }
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw JSONProblem(offset: index, reason: "a number needs digits after '.'") }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) { index += 1 }
            guard digits(&self) > 0 else { throw JSONProblem(offset: index, reason: "a number needs digits in its exponent") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    private mutating func string() throws(JSONProblem) -> String {
        let quote = index
        index += 1
        var runStart = index
        var result = ""
        var escaped: [UInt8] = []
        var hasEscapes = false
        var isASCII = true
        while true {
            guard index < bytes.count else { throw JSONProblem(offset: quote, reason: "this string is never closed") }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") { break }
            if byte >= 0x80 { isASCII = false }
            if byte < 0x20 {
                throw JSONProblem(offset: index, reason: "a control character (0x\(String(byte, radix: 16, uppercase: true))) inside a string; write it escaped")
            }
            if byte == UInt8(ascii: "\\") {
                hasEscapes = true
                escaped.append(contentsOf: bytes[runStart..<index])
                try escape(into: &escaped)
                runStart = index
                continue
            }
            index += 1
        }
        let run = bytes[runStart..<index]
        let end = index
        index += 1
        if hasEscapes {
            escaped.append(contentsOf: run)
            guard let text = String(validating: escaped, as: UTF8.self) else {
                throw JSONProblem(offset: quote, reason: "this string is not valid UTF-8")
            }
            result = text
        } else if isASCII {
            // Most ids and keys: ASCII is valid UTF-8 as it is, no validation pass needed.
            result = bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[runStart..<end]), as: UTF8.self) }
        } else {
            guard let text = String(validating: bytes[runStart..<end], as: UTF8.self) else {
                throw JSONProblem(offset: firstInvalidUTF8(from: runStart, to: end), reason: "invalid UTF-8; the file must be UTF-8")
            }
            result = text
        }
        return result
    }

    private func firstInvalidUTF8(from start: Int, to end: Int) -> Int {
        var position = start
        while position < end {
            var length = 1
            while length <= 4 && position + length <= end {
                if String(validating: bytes[position..<position + length], as: UTF8.self) != nil { break }
                length += 1
            }
            if length > 4 || position + length > end { return position }
            position += length
        }
        return start
    }

    private mutating func escape(into output: inout [UInt8]) throws(JSONProblem) {
        let start = index
        index += 1
        guard index < bytes.count else { throw JSONProblem(offset: start, reason: "this string is never closed") }
        let letter = bytes[index]
        index += 1
        switch letter {
        case UInt8(ascii: "\""): output.append(0x22)
        case UInt8(ascii: "\\"): output.append(0x5C)
        case UInt8(ascii: "/"): output.append(0x2F)
        case UInt8(ascii: "b"): output.append(0x08)
        case UInt8(ascii: "f"): output.append(0x0C)
        case UInt8(ascii: "n"): output.append(0x0A)
        case UInt8(ascii: "r"): output.append(0x0D)
        case UInt8(ascii: "t"): output.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4(at: start)
            if (0xD800...0xDBFF).contains(scalar) {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw JSONProblem(offset: start, reason: "a lone UTF-16 surrogate \\u\(String(scalar, radix: 16, uppercase: true))")
                }
                index += 2
                let low = try hex4(at: start)
                guard (0xDC00...0xDFFF).contains(low) else {
                    throw JSONProblem(offset: start, reason: "a lone UTF-16 surrogate \\u\(String(scalar, radix: 16, uppercase: true))")
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00...0xDFFF).contains(scalar) {
                throw JSONProblem(offset: start, reason: "a lone UTF-16 surrogate \\u\(String(scalar, radix: 16, uppercase: true))")
            }
            output.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
        default:
            throw JSONProblem(offset: start, reason: "unknown escape \\\(Character(Unicode.Scalar(letter))) in a string")
        }
    }

    private mutating func hex4(at escapeStart: Int) throws(JSONProblem) -> UInt32 {
        guard index + 4 <= bytes.count else { throw JSONProblem(offset: escapeStart, reason: "\\u needs four hex digits") }
        var value: UInt32 = 0
        for byte in bytes[index..<index + 4] {
            let digit: UInt8
            switch byte {
            case 0x30...0x39: digit = byte - 0x30
            case 0x41...0x46: digit = byte - 0x41 + 10
            case 0x61...0x66: digit = byte - 0x61 + 10
            default: throw JSONProblem(offset: escapeStart, reason: "\\u needs four hex digits")
            }
            value = value << 4 | UInt32(digit)
        }
        index += 4
        return value
    }
}

