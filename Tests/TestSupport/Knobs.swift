import Foundation

/// The environment knobs of the seeded and long-running tests (docs/guarantees.md lists them).
public enum Knobs {
    /// `name` from the environment, or `fallback` when it is unset or not a number.
    public static func value<T: LosslessStringConvertible>(_ name: String, default fallback: T) -> T {
        ProcessInfo.processInfo.environment[name].flatMap(T.init) ?? fallback
    }

    /// `BASKET_SYNC_SEED`, the one seed to replay, if given.
    public static var replaySeed: UInt64? { ProcessInfo.processInfo.environment["BASKET_SYNC_SEED"].flatMap(UInt64.init) }

    /// The seed to replay, else a fresh one (which the test prints, to replay it).
    public static var seed: UInt64 { replaySeed ?? UInt64.random(in: 1...UInt64(UInt32.max)) }
}
