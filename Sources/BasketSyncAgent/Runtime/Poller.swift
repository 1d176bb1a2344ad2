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
    private let isTreeCart: Bool
    private var cartPath: String
    private let signalPath: String
    private let newPath: String
    private let stateDirectory: String

    /// What is looked at.
    private enum Slot: Int, CaseIterable {
        case cart, cartFollowed, signal, inbox
    }
    /// What each slot's `stat` said at the last look (nil while missing).
    private var seen: [FileInfo?] = Array(repeating: nil, count: Slot.allCases.count)
    /// Until when (monotonic seconds) a slot that changed is looked at as changed again.
    private var unsettled: [Double] = Array(repeating: 0, count: Slot.allCases.count)

    /// How long a path that changed is treated as changed at every look.
    static let settleSeconds = 2.0
    /// The cart was seen changing at the last look: it is taken once a look finds it as it was.
    private var cartSettling = false

    /// Takes the first look: what is there now is the start pass's, later changes are reported.
    /// `databaseDirectory`: where one-shot commands touch their commit signal (see ``Watcher``).
    init(directory: String, cart: String, isTreeCart: Bool, databaseDirectory: String? = nil) {
        self.directory = directory
        self.isTreeCart = isTreeCart
        cartPath = "\(directory)/\(cart)"
        signalPath = isTreeCart ? "\(directory)/\(Layout.cartMarker)" : "\(databaseDirectory ?? "\(directory)/\(Layout.stateDirectory)")/\(Layout.commitSignal)"
        newPath = "\(directory)/inbox/new"
        stateDirectory = "\(directory)/\(Layout.stateDirectory)"
        _ = look()
        unsettled = Array(repeating: 0, count: Slot.allCases.count)
        cartSettling = false
    }

    /// Follows a new cart path (a SIGHUP changed `"cart"`): read at the next look.
    func follow(cart: String) {
        cartPath = "\(directory)/\(cart)"
        seen[Slot.cart.rawValue] = nil
        unsettled[Slot.cart.rawValue] = Posix.monotonicSeconds() + Poller.settleSeconds
    }

    /// Looks once and says what changed since the last look. `onlyFresh` (a retry waits: its
    /// delay is the back-off) leaves out what is only settling: what changed earlier and is
    /// looked at again in case a second write hid in the same time tick — the retry reads
    /// everything anyway, and a failing pass must not run at every look.
    func changes(onlyFresh: Bool = false) -> (kinds: Set<Watcher.Change>, delivered: [String]) {
        (look(onlyFresh: onlyFresh), [])
    }

    private func look(onlyFresh: Bool = false) -> Set<Watcher.Change> {
        let now = Posix.monotonicSeconds()
        var changes = Set<Watcher.Change>()
        /// Whether a slot changed since the last look, or (unless only fresh changes are wanted)
        /// changed less than ``settleSeconds`` ago.
        func changed(_ slot: Slot, _ info: FileInfo?, now: Double) -> Bool {
            if seen[slot.rawValue] != info {
                seen[slot.rawValue] = info
                // Only what is written in place (a file, a directory's listing) can hide a second
                // write in the same time tick: a FIFO, a link, a device is read once.
                let settles = info.map { $0.kind == .regular || (slot == .inbox && $0.kind == .directory) } ?? false
                unsettled[slot.rawValue] = settles ? now + Poller.settleSeconds : 0
                return true
            }
            return !onlyFresh && now < unsettled[slot.rawValue]
        }
        guard Posix.info(directory, follow: false)?.kind == .directory,
              isTreeCart || Posix.info(stateDirectory, follow: false)?.kind == .directory else {
            return [.directoryGone]
        }
        // The cart as a name, and what a link there points to (followSymlinks). A cart that
        // changed is taken once it stood still for one interval: a host writing in place, in more
        // than one write, is never read half-written (inotify waits for the close; a look cannot).
        // A cart removed is no half-written one: taken at once.
        let name = Posix.info(cartPath, follow: false), followed = Posix.info(cartPath, follow: true)
        let fresh = seen[Slot.cart.rawValue] != name || seen[Slot.cartFollowed.rawValue] != followed
        let cartChanged = changed(.cart, name, now: now)
        let followedChanged = changed(.cartFollowed, followed, now: now)
        if fresh, followed != nil {
            cartSettling = true
        } else if cartSettling, !fresh {
            cartSettling = false
            changes.insert(.cart)
        } else if cartChanged || followedChanged {
            changes.insert(.cart)
        }
        if changed(.signal, Posix.info(signalPath, follow: false), now: now) { changes.insert(.commit) }
        // Whatever waits there when it changed is taken (a name delivered again after the first
        // was taken is a new delivery): listed only when it changed.
        if changed(.inbox, Posix.info(newPath, follow: false), now: now), Posix.listDirectory(newPath).contains(where: { !$0.hasPrefix(".") }) {
            changes.insert(.inbox)
        }
        return changes
    }
}

/// When a polling agent looks next: one interval after the last look, or one interval from now
/// after a stall (a look never runs twice to catch up). Both agents' loops share it.
struct LookClock {
    private var next: Double
    private var intervalSeconds: Double

    /// The first look one interval from now.
    init(intervalMs: Int) {
        intervalSeconds = Double(intervalMs) / 1000
        next = Posix.monotonicSeconds() + intervalSeconds
    }

    /// A new pace, the next look one interval from now.
    mutating func restart(intervalMs: Int) { self = LookClock(intervalMs: intervalMs) }

    /// The poll(2) timeout that wakes for the next look, within `timeout` (-1: none).
    func timeout(within timeout: Int32) -> Int32 {
        let untilLook = Int32(max(0, ((next - Posix.monotonicSeconds()) * 1000).rounded(.up)))
        return timeout < 0 ? untilLook : min(timeout, untilLook)
    }

    /// Whether a look is due now; when it is, the one after is scheduled.
    mutating func due() -> Bool {
        let now = Posix.monotonicSeconds()
        guard now >= next else { return false }
        next += intervalSeconds
        if next < now { next = now + intervalSeconds }
        return true
    }
}
