/// A Mealz-side input: what the Mealz UI or WebView asks for.
public enum MealzEvent: Hashable, Sendable {
    /// Signed deltas pushed by the Mealz UI (SSR `pushProductsToCart`).
    case basketDelta([RetailerProduct])
    /// The WebView's whole Mealz basket, absolute; diffed against Mealz's view. `basket` is the
    /// number of the Mealz basket it was based on (the `basket` of the last notification the
    /// WebView saw): a state for another basket than the current one is stale and never diffed.
    /// Without it the state is diffed against the current basis.
    case basketState([RetailerProduct], basket: UInt64? = nil)
    /// An affiliated basket landing in this cart: its lines are added as deltas, once per id.
    case basketTransfer([RetailerProduct], transferId: String)
    /// The shopper asked to open the host's cart.
    case redirectToCart
}
