import BasketSync

/// The instants of the records and the logs: `2026-11-30T09:30:00.123Z` (UTC, milliseconds).
///
/// Computed from the Unix time with the civil-calendar algorithm (Howard Hinnant's
/// `civil_from_days`), so that this target needs neither libc nor a locale.
package enum Timestamp {
    /// The text of `date`, cut to the millisecond (never stamped ahead of its instant by more
    /// than the microsecond of binary noise).
    package static func text(_ date: Date) -> String {
        let unix = date.timeIntervalSince1970
        var milliseconds = Int64((unix * 1000).rounded(.down))
        // A whole millisecond may land a hair below itself in binary (times 1000, or through
        // `Date`'s 2001 epoch): within a microsecond of the next millisecond, it is that one.
        if Double(milliseconds + 1) / 1000 - unix < 1e-6 { milliseconds += 1 }
        let (days, dayMilliseconds) = milliseconds.quotientAndRemainderFloored(dividingBy: 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        let seconds = dayMilliseconds / 1000
        // Written digit by digit (a record and a log line each take one or more).
        guard (0...9999).contains(year) else {
            return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(seconds / 3600, 2)):\(pad(seconds / 60 % 60, 2)):"
                + "\(pad(seconds % 60, 2)).\(pad(dayMilliseconds % 1000, 3))Z"
        }
        return String(unsafeUninitializedCapacity: 24) { buffer in
            func put(_ value: Int64, _ width: Int, at offset: Int) {
                var value = value
                for index in stride(from: offset + width - 1, through: offset, by: -1) {
                    buffer[index] = UInt8(truncatingIfNeeded: 0x30 + value % 10)
                    value /= 10
                }
            }
            put(year, 4, at: 0)
            buffer[4] = 0x2D
            put(month, 2, at: 5)
            buffer[7] = 0x2D
            put(day, 2, at: 8)
            buffer[10] = 0x54
            put(seconds / 3600, 2, at: 11)
            buffer[13] = 0x3A
            put(seconds / 60 % 60, 2, at: 14)
            buffer[16] = 0x3A
            put(seconds % 60, 2, at: 17)
            buffer[19] = 0x2E
            put(dayMilliseconds % 1000, 3, at: 20)
            buffer[23] = 0x5A
            return 24
        }
    }

    /// The instant a timestamp names; nil unless it has exactly the form ``text(_:)`` writes.
    package static func date(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 24 else { return nil }
        let shape = Array("0000-00-00T00:00:00.000Z".utf8)
        for (byte, expected) in zip(bytes, shape) {
            let isDigit = (0x30...0x39).contains(byte)
            guard expected == 0x30 ? isDigit : byte == expected else { return nil }
        }
        func number(_ range: Range<Int>) -> Int64 { bytes[range].reduce(0) { $0 * 10 + Int64($1 - 0x30) } }
        let (year, month, day) = (number(0..<4), number(5..<7), number(8..<10))
        let (hour, minute, second) = (number(11..<13), number(14..<16), number(17..<19))
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 60 else { return nil }
        let seconds = days(fromCivil: year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        let milliseconds = seconds * 1000 + number(20..<23)
        return Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }

    private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
}

extension Int64 {
    /// Division rounding toward minus infinity, so that instants before 1970 fall on the right day.
    fileprivate func quotientAndRemainderFloored(dividingBy divisor: Int64) -> (Int64, Int64) {
        let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }
}
