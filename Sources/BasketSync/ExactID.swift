/// An id compared byte for byte, as docs/spec.md §4 wants ids compared: Swift's `String` equality, hashing
/// and ordering follow Unicode canonical equivalence (`"café"` in NFC equals `"café"` in NFD, the
/// Kelvin sign equals `K`), ids do not — two spellings are two SKUs, two orders, two events.
///
/// Every map or set keyed by an id uses it. It converts from a string literal, so
/// `view["café"]` reads as before.
///
/// It is deliberately not `CodingKeyRepresentable`: a map keyed by it encodes as an array
/// `[id, value, id, value, …]`, because Foundation's `JSONDecoder` merges object keys that are
/// canonically equivalent (it would read `{"café": 1, "café": 2}` in NFC and NFD as one SKU).
public struct ExactID: Hashable, Comparable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The id as written.
    public let string: String

    /// Wraps an id.
    public init(_ string: String) { self.string = string }

    /// Wraps a literal id.
    public init(stringLiteral value: String) { self.string = value }

    /// Equal when the UTF-8 bytes are equal.
    public static func == (lhs: ExactID, rhs: ExactID) -> Bool { lhs.string.isByteEqual(to: rhs.string) }

    /// Hashes the UTF-8 bytes.
    public func hash(into hasher: inout Hasher) {
        let bytes = string.utf8
        if bytes.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
            for byte in bytes { hasher.combine(byte) }
        }
        hasher.combine(0xFF as UInt8)  // never in UTF-8: ends the id
    }

    /// Byte order (for UTF-8, the order of the code points).
    public static func < (lhs: ExactID, rhs: ExactID) -> Bool {
        lhs.string.utf8.lexicographicallyPrecedes(rhs.string.utf8)
    }

    /// The id as written.
    public var description: String { string }

    /// Reads an id written as a string.
    public init(from decoder: any Decoder) throws { self.string = try decoder.singleValueContainer().decode(String.self) }

    /// Writes the id as a string.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(string)
    }
}

extension String {
    /// Whether two strings have the same UTF-8 bytes (`==` on `String` is canonical equivalence).
    /// Compared eight bytes at a time: keys are looked up on every line of every cart.
    package func isByteEqual(to other: String) -> Bool {
        let lhs = utf8, rhs = other.utf8
        guard lhs.count == rhs.count else { return false }
        let compared = lhs.withContiguousStorageIfAvailable { a in
            rhs.withContiguousStorageIfAvailable { b in sameBytes(a, b) }
        }
        if let compared, let same = compared { return same }
        return lhs.elementsEqual(rhs)
    }

    /// The string as an id compared byte for byte.
    package var exact: ExactID { ExactID(self) }

    /// The fields between each `separator` byte (ASCII), empty ones left out unless
    /// `omittingEmpty` is false. Split by UTF-8 bytes, as ids are compared: no Unicode grapheme
    /// rules (which cost a hundred times more on the notes read for every cart at a start).
    package func fields(_ separator: UInt8, omittingEmpty: Bool = true) -> [Substring] {
        utf8.split(separator: separator, omittingEmptySubsequences: omittingEmpty).map { Substring($0) }
    }
}

extension Optional where Wrapped == String {
    /// Whether two optional strings are both nil or have the same UTF-8 bytes.
    package func isByteEqual(to other: String?) -> Bool {
        switch (self, other) {
        case (nil, nil): true
        case let (a?, b?): a.isByteEqual(to: b)
        default: false
        }
    }
}

/// Whether two buffers of the same length hold the same bytes, eight at a time.
private func sameBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Bool {
    guard let x = UnsafeRawPointer(a.baseAddress), let y = UnsafeRawPointer(b.baseAddress), x != y else { return true }
    var offset = 0
    while offset + 8 <= a.count {
        if x.loadUnaligned(fromByteOffset: offset, as: UInt64.self) != y.loadUnaligned(fromByteOffset: offset, as: UInt64.self) { return false }
        offset += 8
    }
    while offset < a.count {
        if a[offset] != b[offset] { return false }
        offset += 1
    }
    return true
}
