/// The library's settings, read from `basket-sync.json` by the agent.
public struct SyncConfiguration: Hashable, Sendable {
    /// How long a batch waits for the echo of a host that does not write `syncedThrough`.
    public var pendingTimeout: Duration
    /// How many rolled-back batches are remembered to report a late echo.
    public var rolledBackMemory: Int
    /// How many lines the rolled-back batches remembered hold at most together (the newest is
    /// kept whatever its size): the state, held in memory and saved at every step, stays bounded
    /// by lines, not only by batches.
    public var rolledBackLines: Int
    /// The highest quantity a cart line may hold: a Mealz delta that would take a line of the host
    /// cart (as last taken, with the batches pending on their way) past it is recorded clamped so
    /// that the line lands there, and reported. At most ``largestMaxQuantity`` (a larger one is
    /// taken as that).
    public var maxQuantity: Int {
        didSet { maxQuantity = min(max(maxQuantity, 0), Self.largestMaxQuantity) }
    }

    /// The largest `maxQuantity`: 2^53 − 1, a number every JSON reader keeps exact — and far
    /// enough below `Int.max` that quantities added up past the limit are seen past it, never
    /// held at `Int.max` as if within.
    public static let largestMaxQuantity = 9_007_199_254_740_991

    /// The SDK's defaults: a 10 s pending window.
    public init(pendingTimeout: Duration = .seconds(10), rolledBackMemory: Int = 32, rolledBackLines: Int = 100_000, maxQuantity: Int = 1_000_000) {
        self.pendingTimeout = pendingTimeout
        self.rolledBackMemory = rolledBackMemory
        self.rolledBackLines = rolledBackLines
        self.maxQuantity = min(max(maxQuantity, 0), Self.largestMaxQuantity)
    }
}


extension Duration {
    /// The duration in seconds, for `Date` arithmetic.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
