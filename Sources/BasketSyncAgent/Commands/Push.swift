import BasketSync
import BasketSyncWire

extension Commands {
    /// What `push` drops into the inbox.
    public enum PushKind: Equatable, Sendable {
        /// `push sku=+2 sku=-1`: signed deltas.
        case delta
        /// `push --state sku=3`: the WebView's whole basket, based on the notification of `basket`
        /// (nil: the current basket, read from the database).
        case state(basket: UInt64?)
        /// `push --transfer ID sku=2`: an affiliated basket landing.
        case transfer(String)
        /// `push --redirect`: the shopper asked for the host's cart.
        case redirect
    }

    /// `push`: delivers one Mealz event the Maildir way (in `inbox/tmp/`, fsync, rename into
    /// `inbox/new/`). Returns the event id.
    public static func push(directory: String, kind: PushKind, products: [RetailerProduct], id: String?) throws(AgentError) -> String {
        // A broken configuration must not stop deliveries: the agent keeps its settings in force,
        // and the defaults check what the Mealz side sends meanwhile.
        let limits = ((try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()).limits
        if let id { try checkIdentifier(id, "push: the event id", limits: limits) }
        if case let .transfer(transferId) = kind { try checkIdentifier(transferId, "push: the transfer id", limits: limits) }
        for product in products {
            try checkIdentifier(product.id, "push: the product id", limits: limits)
            if product.quantity.magnitude > UInt(limits.maxQuantity) {
                throw .usage("push: \(JSONWriter.quoted(product.id))=\(product.quantity) is out of range; the limit is \(limits.maxQuantity)")
            }
        }
        let workspace = Workspace.of(directory)
        // A tree's cart: its inbox reached through its folder opened without following a link.
        var folder: CartFolder?
        switch workspace {
        case .treeRoot:
            throw .usage("\(directory): is a tree of carts; push to one of them: basket-sync -C \(directory)/CART-ID push …")
        case .treeCart:
            // The Mealz side may come first: the cart is made (and adopted) here.
            try prepareCart(directory: directory)
            do { folder = try CartFolder(directory) } catch { throw .system(error) }
        case .directory:
            break
        }
        let inbox = Inbox(directory: "\(folder?.path ?? directory)/inbox")
        guard Posix.isDirectory(inbox.folder("tmp")), Posix.isDirectory(inbox.folder("new")) else {
            throw .missingInput("\(directory): not a sync directory (no inbox/tmp and inbox/new); run basket-sync init there first")
        }
        let now = Int64((Date().timeIntervalSince1970 * 1_000_000).rounded(.down))
        let unique = Store.newSyncId()
        let eventId = id ?? "push-\(now)-\(unique.prefix(8))"
        // A Maildir name (docs/spec.md §4 rule 6): seconds, then M and the microseconds, so that
        // deliveries of one clock tick are ordered by the time the name carries, whoever made them.
        let name = "\(now / 1_000_000).M\(now % 1_000_000)P\(Posix.processId)R\(unique).basket-sync"
        let event: MealzEvent
        switch kind {
        case .delta: event = .basketDelta(products)
        case let .state(basket):
            var based = basket
            // A database this account may not read (another account's, in a shared directory)
            // leaves the basket unsaid: the agent takes the state as of the current one. A
            // delivery is never refused for it.
            if based == nil { based = try? currentBasket(directory: directory, workspace: workspace) ?? nil }
            event = .basketState(products, basket: based)
        case let .transfer(transferId): event = .basketTransfer(products, transferId: transferId)
        case .redirect: event = .redirectToCart
        }
        let pinned: Inbox
        // A delivery makes nothing but its own file: bad/ is the agent's to make.
        do { pinned = try inbox.pinned(makingBad: false) } catch { throw .system(error) }
        do { try pinned.deliver(EventFormat.encode(InboxEvent(id: eventId, event: event)), name: name) } catch {
            throw .system(pinned.shown(error))
        }
        withExtendedLifetime(folder) {}
        return eventId
    }

    /// The current Mealz basket of `directory`, as a WebView that saw the last notification knows
    /// it; nil before the database exists (the agent makes it, and a state is then diffed).
    private static func currentBasket(directory: String, workspace: Workspace) throws(AgentError) -> UInt64? {
        if workspace == .directory, !Posix.exists(try Database.path(of: directory)) { return nil }
        let store = try Store.open(directory: directory, readOnly: true)
        return try store.withTransaction { () throws(AgentError) in try store.loadState().basket }
    }
}
