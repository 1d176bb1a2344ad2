import BasketSyncWire

/// The notes kept as numbers separated by single spaces (a file's identity, what a file was
/// given, the versions of the cart), read and written byte by byte: a `String` and a generic parse
/// a field cost tens of times more, on notes read at every change.
enum NoteNumbers {
    /// The fields of `bytes` between spaces (empty ones left out).
    static func fields(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var fields: [ArraySlice<UInt8>] = []
        fields.reserveCapacity(8)
        var start = 0
        for index in bytes.indices where bytes[index] == UInt8(ascii: " ") {
            if index > start { fields.append(bytes[start..<index]) }
            start = index + 1
        }
        if bytes.count > start { fields.append(bytes[start...]) }
        return fields
    }

    /// The fields of `text` between spaces (empty ones left out).
    static func fields(_ text: String) -> [ArraySlice<UInt8>] { fields(Array(text.utf8)) }

    /// The field as an unsigned integer: ASCII digits with an optional `+`, as `UInt64(_:)` reads
    /// them (`-0` too); nil when it is not one or does not fit.
    static func uint64(_ field: ArraySlice<UInt8>) -> UInt64? {
        if field.first == UInt8(ascii: "-") { return magnitude(field.dropFirst()) == 0 ? 0 : nil }
        return magnitude(field.first == UInt8(ascii: "+") ? field.dropFirst() : field)
    }

    /// ASCII digits alone as an unsigned integer; nil when they are not, or do not fit.
    private static func magnitude(_ digits: ArraySlice<UInt8>) -> UInt64? {
        guard !digits.isEmpty else { return nil }
        var value: UInt64 = 0
        for byte in digits {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times.addingReportingOverflow(UInt64(byte - 0x30))
            guard !overflow, !carry else { return nil }
            value = sum
        }
        return value
    }

    /// The field as a signed integer, as `Int64(_:)` reads it; nil when it is not one or does
    /// not fit.
    static func int64(_ field: ArraySlice<UInt8>) -> Int64? {
        guard field.first == UInt8(ascii: "-") else { return uint64(field).flatMap { $0 <= UInt64(Int64.max) ? Int64($0) : nil } }
        guard let magnitude = magnitude(field.dropFirst()) else { return nil }
        if magnitude == UInt64(Int64.max) + 1 { return Int64.min }
        return magnitude <= UInt64(Int64.max) ? -Int64(magnitude) : nil
    }

    /// The fields of `bytes` that read as signed integers, in order (the others left out).
    static func int64s(_ bytes: [UInt8]) -> [Int64] {
        var numbers: [Int64] = []
        for field in fields(bytes) { if let number = int64(field) { numbers.append(number) } }
        return numbers
    }

    /// The fields of `text` that read as signed integers, in order (the others left out).
    static func int64s(_ text: String) -> [Int64] { int64s(Array(text.utf8)) }

    /// The numbers, in decimal, separated by single spaces.
    static func bytes(_ numbers: some Sequence<Int64>) -> [UInt8] {
        var writer = JSONWriter()
        var first = true
        for number in numbers {
            if !first { writer.raw(" ") }
            writer.integer(number)
            first = false
        }
        return writer.bytes
    }

    /// The numbers, in decimal, separated by single spaces.
    static func text(_ numbers: some Sequence<Int64>) -> String { String(decoding: bytes(numbers), as: UTF8.self) }
}
