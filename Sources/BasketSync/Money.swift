/// An exact, non-negative amount of money, such as `42.50`.
///
/// It is parsed from text and written back as the same digits (`"0.10"` stays `0.10`): no binary
/// floating point anywhere in the path. The value is a `Decimal` for arithmetic and comparison.
public struct Money: Hashable, Codable, Sendable, CustomStringConvertible {
    /// The exact value.
    public let amount: Decimal
    /// The canonical text: digits, optionally a point and fraction digits, no leading zeros.
    public let text: String

    /// The most digits accepted; `Decimal` holds 38 significant digits exactly.
    public static let maximumDigits = 30

    /// Why a text is not an amount (see ``parse(_:)``).
    public enum Problem: Error, Equatable, Sendable {
        /// Not the form of an amount: a comma, a sign, an exponent, a space, a point without
        /// digits on both sides, or no digit at all.
        case notAnAmount
        /// The form of an amount, with this many digits: more than ``Money/maximumDigits``.
        case tooManyDigits(Int)
    }

    /// Parses `42`, `42.5` or `42.50`. Returns nil for anything else: `42,50`, `-1`, `1e3`,
    /// `.5`, `5.`, `+3`, spaces, or more than ``maximumDigits`` digits.
    public init?(_ text: String) {
        guard case let .success(money) = Money.parse(text) else { return nil }
        self = money
    }

    /// Parses as ``init(_:)`` does, and says why a text is refused.
    public static func parse(_ text: String) -> Result<Money, Problem> {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let integerPart = parts.first, !integerPart.isEmpty,
              integerPart.allSatisfy(\.isASCIIDigit) else { return .failure(.notAnAmount) }
        var fraction: Substring = ""
        if parts.count == 2 {
            fraction = parts[1]
            guard !fraction.isEmpty, fraction.allSatisfy(\.isASCIIDigit) else { return .failure(.notAnAmount) }
        }
        guard integerPart.count + fraction.count <= Money.maximumDigits else { return .failure(.tooManyDigits(integerPart.count + fraction.count)) }
        let integerDigits = integerPart.drop { $0 == "0" }
        let canonical = (integerDigits.isEmpty ? "0" : String(integerDigits))
            + (fraction.isEmpty ? "" : "." + fraction)
        guard let amount = Decimal(string: canonical) else { return .failure(.notAnAmount) }
        return .success(Money(amount: amount, text: canonical))
    }

    private init(amount: Decimal, text: String) {
        self.amount = amount
        self.text = text
    }

    /// The canonical text, as written in payment records.
    public var description: String { text }

    /// Equal amounts compare equal whatever their scale (`42.5 == 42.50`).
    public static func == (lhs: Money, rhs: Money) -> Bool { lhs.amount == rhs.amount }

    /// Hashes the amount, consistently with `==`.
    public func hash(into hasher: inout Hasher) { hasher.combine(amount) }

    /// Decodes from a JSON string such as `"42.50"`; a JSON number is refused (it may be a float).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let money = Money(text) else {
            throw DecodingError.dataCorruptedError(
                in: container, debugDescription: "\"\(text)\" is not an amount like 42.50")
        }
        self = money
    }

    /// Encodes as a JSON string of the canonical text.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
