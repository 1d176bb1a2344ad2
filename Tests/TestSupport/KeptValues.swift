/// A cart's kept values (its state, its notes, what its files were given) as the layout keeps
/// them: one row of the table `kept` per cart, its entries one after the other — the key's
/// length (one byte), the key, the value's length (four bytes, little-endian), the value. The
/// host cart keeps rows of its own.
public enum KeptValues {
    public static func decode(_ row: [UInt8]) -> [(key: String, value: [UInt8])] {
        var entries: [(key: String, value: [UInt8])] = []
        var at = 0
        while at < row.count {
            let keyLength = Int(row[at])
            guard at + 1 + keyLength + 4 <= row.count else { return entries }
            let key = String(decoding: row[(at + 1)..<(at + 1 + keyLength)], as: UTF8.self)
            let lengthAt = at + 1 + keyLength
            let length = (0..<4).reduce(0) { $0 | Int(row[lengthAt + $1]) << (8 * $1) }
            guard lengthAt + 4 + length <= row.count else { return entries }
            entries.append((key, Array(row[(lengthAt + 4)..<(lengthAt + 4 + length)])))
            at = lengthAt + 4 + length
        }
        return entries
    }

    public static func encode(_ entries: [(key: String, value: [UInt8])]) -> [UInt8] {
        var row: [UInt8] = []
        for (key, value) in entries {
            row.append(UInt8(key.utf8.count))
            row.append(contentsOf: key.utf8)
            row.append(contentsOf: (0..<4).map { UInt8(truncatingIfNeeded: value.count >> (8 * $0)) })
            row.append(contentsOf: value)
        }
        return row
    }
}
