/// A Mealz-side input: what the Mealz UI or WebView asks for.
public enum MealzEvent: Hashable, Sendable {
    /// Signed deltas pushed by the Mealz UI (SSR `pushProductsToCart`).
    case basketDelta([RetailerProduct])
    /// The WebView's whole Mealz basket, absolute; diffed against Mealz's view.
    case basketState([RetailerProduct])
    /// An affiliated basket landing in this cart: its lines are added as deltas, once per id.
    case basketTransfer([RetailerProduct], transferId: String)
    /// The shopper asked to open the host's cart.
    case redirectToCart
}
