/// A small seeded generator (SplitMix64) for the seeded tests and check-host, so that a run can be replayed from
/// the seed it prints.
public struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    /// A generator that replays the same sequence for the same seed.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension SplitMix64 {
    /// A number in `0..<bound` (`bound` > 0).
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}
