import BasketSync
import Glibc
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
        var workspace = Workspace.of(directory)
        // A tree's cart that is made, its tree's configuration broken: delivered into all the same.
        if workspace == .directory, Workspace.isMadeTreeCart(directory) {
            workspace = .treeCart(root: Posix.dirname(of: directory), id: Posix.basename(of: directory))
        }
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
            if let outer = Workspace.enclosing(directory) {
                throw .missingInput("\(directory): not a sync directory: it is inside \(outer), a sync directory or a tree of carts; push with -C on that directory (in a tree, on a cart right under its root)")
            }
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
            if based == nil {
                do throws(AgentError) { based = try currentBasket(directory: directory, workspace: workspace) } catch {
                    // A database this account may not read (another account's, in a shared
                    // directory): the basket as the notifications tell it (closing a basket
                    // writes one of the new basket at once). Left unsaid, the state would be
                    // diffed against whatever basket is current when the agent takes it — a
                    // payment in between, and the paid units pushed again — so, when nothing
                    // tells it, the state is refused, never delivered without its basket.
                    guard let told = basketFromNotifications(directory: folder?.path ?? directory, workspace: workspace, shown: directory) else {
                        throw .refused("push --state: the current Mealz basket cannot be known here (\(error.description)); and \(directory)/\(Projection.notifications.fileName) tells none: give --basket N, the \"basket\" of the last notification the WebView saw, or push as the directory's owner")
                    }
                    based = told
                }
            }
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

    /// The basket of the last notification of `directory` (its live file, else its newest rotated
    /// part), read only from a file the agent's account (the sync directory's owner, a tree's
    /// root's — a cart's folder may be the Mealz side's) or root owns and nobody else may write;
    /// nil when none tells it.
    private static func basketFromNotifications(directory: String, workspace: Workspace, shown: String) -> UInt64? {
        let path = "\(directory)/\(Projection.notifications.fileName)"
        var agentPlace = shown
        if case let .treeCart(root, _) = workspace { agentPlace = root }
        let owner = Posix.info(agentPlace, follow: true)?.owner ?? geteuid()
        for file in [path] + JSONLinesFile.rotatedParts(of: path).prefix(1) {
            guard let last = JSONLinesFile(path: file).lastRecord(isRecord: Projection.notifications.isRecord) else { continue }
            guard Trust.refusal(last.info, path: file, what: "the notifications", as: owner) == nil,
                  let notification = try? RecordFormat.notification(last.line) else { return nil }
            return notification.basket
        }
        return nil
    }

    /// The current Mealz basket of `directory`, as a WebView that saw the last notification knows
    /// it; nil before the database exists (the agent makes it, and a state is then diffed).
    private static func currentBasket(directory: String, workspace: Workspace) throws(AgentError) -> UInt64? {
        let database = try Database.path(of: directory)
        // Not there yet (the agent makes it): a state before it is diffed. One this account may
        // not look at is not missing: it is said.
        if workspace == .directory, !Posix.exists(database) {
            guard Posix.isPermissionDenied(database) else { return nil }
            throw .system(SystemError(operation: "open", path: database, code: SystemError.permissionDenied))
        }
        let store = try Store.open(directory: directory, readOnly: true)
        return try store.withTransaction { () throws(AgentError) in try store.loadState().basket }
    }
}
