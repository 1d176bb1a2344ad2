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
    /// that the line lands there, and reported.
    public var maxQuantity: Int

    /// The SDK's defaults: a 10 s pending window.
    public init(pendingTimeout: Duration = .seconds(10), rolledBackMemory: Int = 32, rolledBackLines: Int = 100_000, maxQuantity: Int = 1_000_000) {
        self.pendingTimeout = pendingTimeout
        self.rolledBackMemory = rolledBackMemory
        self.rolledBackLines = rolledBackLines
        self.maxQuantity = maxQuantity
    }
}


extension Duration {
    /// The duration in seconds, for `Date` arithmetic.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
