import BasketSyncWire

/// Sees the changes of one sync directory (or a cart of a tree) by looking, where inotify is
/// blind (a share written by other machines, a FUSE mount): each look stats the cart, the commit
/// signal and `inbox/new/`, and lists `inbox/new/` when it changed. It says what changed in the
/// watcher's terms (``Watcher/Change``), so the agent's passes are the same either way.
///
/// A file system stamps times at its own granularity, so two writes within one tick can leave
/// the same identity: what changed is looked at again at every look for ``settleSeconds`` after
/// the change was seen (the cart read again, `inbox/new/` listed again), and only then trusted.
final class Poller {
    let directory: String
    private var cartComponents: [String]
    private let isTreeCart: Bool
    /// The identity of each path at the last look ([] while missing).
    private var identities: [String: [Int64]] = [:]
    /// Until when (monotonic seconds) a path that changed is looked at as changed again.
    private var unsettled: [String: Double] = [:]

    /// How long a path that changed is treated as changed at every look.
    static let settleSeconds = 2.0

    /// Takes the first look: what is there now is the start pass's, later changes are reported.
    init(directory: String, cart: String, isTreeCart: Bool) {
        self.directory = directory
        self.isTreeCart = isTreeCart
        cartComponents = cart.split(separator: "/").map(String.init)
        _ = look()
        unsettled = [:]
    }

    /// Follows a new cart path (a SIGHUP changed `"cart"`).
    func follow(cart: String) {
        cartComponents = cart.split(separator: "/").map(String.init)
        _ = changed(cartPath, now: Posix.monotonicSeconds())
    }

    private var cartPath: String { "\(directory)/" + cartComponents.joined(separator: "/") }

    /// Looks once and says what changed since the last look.
    func changes() -> (kinds: Set<Watcher.Change>, delivered: [String]) {
        (look(), [])
    }

    private func look() -> Set<Watcher.Change> {
        let now = Posix.monotonicSeconds()
        var changes = Set<Watcher.Change>()
        guard Posix.linkInfo(directory)?.kind == .directory,
              isTreeCart || Posix.linkInfo("\(directory)/\(Store.stateDirectoryName)")?.kind == .directory else {
            return [.directoryGone]
        }
        // The cart as a name, and what a link there points to (followSymlinks).
        if changed(cartPath, now: now) || changed(cartPath, following: true, now: now) { changes.insert(.cart) }
        let signal = isTreeCart ? "\(directory)/\(Tree.markerName)" : "\(directory)/\(Store.stateDirectoryName)/\(Store.commitSignalName)"
        if changed(signal, now: now) { changes.insert(.commit) }
        // Whatever waits there when it changed is taken (a name delivered again after the first
        // was taken is a new delivery): listed only when it changed.
        let new = "\(directory)/inbox/new"
        if changed(new, now: now), Posix.listDirectory(new).contains(where: { !$0.hasPrefix(".") }) { changes.insert(.inbox) }
        return changes
    }

    /// Whether `path` changed since the last look, or changed less than ``settleSeconds`` ago.
    private func changed(_ path: String, following: Bool = false, now: Double) -> Bool {
        let key = following ? path + "\u{0}" : path
        let identity = (following ? Posix.info(path) : Posix.linkInfo(path))?.identity ?? []
        if identities[key] != identity {
            identities[key] = identity
            unsettled[key] = now + Poller.settleSeconds
            return true
        }
        guard let until = unsettled[key] else { return false }
        if now >= until { unsettled[key] = nil }
        return true
    }
}
