import BasketSyncWire

/// A tree's root opened once for the looks of its polled carts: each look reaches a cart's files
/// from it (`ID/cart.json`: two names for the kernel to walk, not every folder from `/`). The
/// root's path is asked once a look: a root put in its place is followed as its path would be.
/// (Holding each cart's folder open as well saves no time: the kernel's work is then finding
/// the descriptor instead of the name, measured the same.)
final class PollRoot {
    let path: String
    private(set) var fd: Int32
    private var device: UInt64 = 0, inode: UInt64 = 0

    /// Nil when the root cannot be opened (the looks then go by path).
    init?(_ path: String) {
        self.path = path
        fd = -1
        guard reopen() else { return nil }
    }

    deinit { if fd >= 0 { Posix.close(fd) } }

    /// Once a look: the root its path names now, opened again when it is another.
    func refresh() {
        guard let now = Posix.info(path, follow: true), now.device != device || now.inode != inode else { return }
        _ = reopen()
    }

    private func reopen() -> Bool {
        guard let opened = Posix.openFolderPath(path) else { return false }
        if fd >= 0 { Posix.close(fd) }
        fd = opened.fd
        device = opened.info.device
        inode = opened.info.inode
        return true
    }
}

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
    /// A tree cart's root, opened once (``PollRoot``); nil: whole paths.
    private let root: PollRoot?
    /// The files looked at, as C strings (made once: a look makes none), and where from: a
    /// tree cart's from its root (`at` is then the root's descriptor when it was opened), else
    /// from `/` or the pinned folder a `/proc/self/fd/N/` path names.
    private struct Paths {
        var at: Int32
        var cart: [CChar]
        var signal: [CChar]
        var signalAt: Int32
        var inbox: [CChar]
    }
    private var paths: Paths
    /// The folder itself and (a sync directory) its `.basket-sync/`.
    private let directoryPath: [CChar]
    private let stateDirectory: [CChar]
    private let newFolder: String

    /// One thing looked at: what its `stat` said at the last look (nil while missing), and
    /// until when (monotonic seconds) it is looked at as changed again. Kept in the poller
    /// itself, not in arrays: ten thousand carts a second are looked at.
    private struct Looked {
        var seen: FileInfo?
        var until = 0.0
        /// Only what is written in place (a file, a directory's listing) can hide a second
        /// write in the same time tick: a FIFO, a link, a device is read once.
        let settlesAsDirectory: Bool
    }
    /// The cart's name, what a link there leads to, the commit signal, `inbox/new/`.
    private var cart = Looked(settlesAsDirectory: false)
    private var cartFollowed = Looked(settlesAsDirectory: false)
    private var signal = Looked(settlesAsDirectory: false)
    private var inbox = Looked(settlesAsDirectory: true)

    /// How long a path that changed is treated as changed at every look.
    static let settleSeconds = 2.0
    /// The cart was seen changing at the last look: it is taken once a look finds it as it was.
    private var cartSettling = false
    /// A tree cart's marker is looked at every ``markerRounds`` looks at least (what changes it
    /// without the tree's commit signal — a marker lost or written by hand — is seen within
    /// them); the carts take their turns spread over the rounds.
    static let markerRounds = 8
    private var looksToMarker: Int

    /// Takes the first look: what is there now is the start pass's, later changes are reported.
    /// `databaseDirectory`: where one-shot commands touch their commit signal (see ``Watcher``).
    /// `root`: a tree cart's root, opened once; its files are reached from it by `ID/…`.
    init(directory: String, cart: String, isTreeCart: Bool, databaseDirectory: String? = nil, root: PollRoot? = nil) {
        self.directory = directory
        self.isTreeCart = isTreeCart
        // A tree cart reached from its root by its id; anything else by its whole path.
        let root = root.flatMap { root in isTreeCart && directory.hasPrefix(root.path + "/") ? root : nil }
        self.root = root
        let reach = root.map { String(directory.dropFirst($0.path.count + 1)) } ?? directory
        let at = root?.fd ?? Posix.reachedAsCString(directory).at
        func path(_ rest: String?) -> [CChar] {
            let whole = rest.map { "\(reach)/\($0)" } ?? reach
            return root == nil ? Posix.reachedAsCString(whole).relative : Array(whole.utf8CString)
        }
        directoryPath = path(nil)
        stateDirectory = path(Layout.stateDirectory)
        let signal = isTreeCart ? (at, path(Layout.cartMarker)) : Posix.reachedAsCString("\(databaseDirectory ?? "\(directory)/\(Layout.stateDirectory)")/\(Layout.commitSignal)")
        paths = Paths(at: at, cart: path(cart), signal: signal.1, signalAt: signal.0, inbox: path("inbox/new"))
        newFolder = "\(directory)/inbox/new"
        looksToMarker = (directory.hashValue % Poller.markerRounds + Poller.markerRounds) % Poller.markerRounds
        _ = look()
        (self.cart.until, cartFollowed.until, self.signal.until, inbox.until) = (0, 0, 0, 0)
        cartSettling = false
    }

    /// Follows a new cart path (a SIGHUP changed `"cart"`): read at the next look.
    func follow(cart: String) {
        paths.cart = root.map { Array("\(directory.dropFirst($0.path.count + 1))/\(cart)".utf8CString) } ?? Posix.reachedAsCString("\(directory)/\(cart)").relative
        self.cart.seen = nil
        self.cart.until = Posix.monotonicSeconds() + Poller.settleSeconds
    }

    /// Looks once and says what changed since the last look. `onlyFresh` (a retry waits: its
    /// delay is the back-off) leaves out what is only settling: what changed earlier and is
    /// looked at again in case a second write hid in the same time tick — the retry reads
    /// everything anyway, and a failing pass must not run at every look.
    ///
    /// A tree cart's marker — where one-shot commands signal their commits — is looked at only
    /// when `treeSignalled` (the tree's own commit signal changed: see ``Agent/look()``), while
    /// it settles, or every ``markerRounds`` looks.
    func changes(onlyFresh: Bool = false, now: Double = Posix.monotonicSeconds(), treeSignalled: Bool = true) -> (kinds: Set<Watcher.Change>, delivered: [String]) {
        looksToMarker -= 1
        let due = treeSignalled || looksToMarker < 0
        if looksToMarker < 0 { looksToMarker = Poller.markerRounds - 1 }
        return (look(onlyFresh: onlyFresh, now: now, markerDue: due), [])
    }

    /// Two `stat`s a look for a tree cart whose cart is a file (the cart, `inbox/new/`), the
    /// marker's when due; its folder and its marker are looked at when something is missing or
    /// changed — a
    /// folder swapped for a link or another folder is the root's to see (its listing, or inotify
    /// on it), as any cart coming or going.
    private func look(onlyFresh: Bool = false, now: Double = Posix.monotonicSeconds(), markerDue: Bool = true) -> Set<Watcher.Change> {
        var paths = paths
        // The root as opened now (opened again when its path names another).
        if let root {
            paths.at = root.fd
            paths.signalAt = root.fd
        }
        var changes = Set<Watcher.Change>()
        /// Whether a slot changed since the last look, or (unless only fresh changes are wanted)
        /// changed less than ``settleSeconds`` ago.
        func changed(_ looked: inout Looked, _ info: FileInfo?) -> Bool {
            if looked.seen != info {
                looked.seen = info
                let settles = info.map { $0.kind == .regular || (looked.settlesAsDirectory && $0.kind == .directory) } ?? false
                looked.until = settles ? now + Poller.settleSeconds : 0
                return true
            }
            return !onlyFresh && now < looked.until
        }
        var looksAtSignal = !isTreeCart || markerDue || now < signal.until
        var signalNow = looksAtSignal ? Posix.info(at: paths.signalAt, paths.signal, follow: false) : signal.seen
        // The cart as a name, and what a link there points to (followSymlinks). A cart that
        // changed is taken once it stood still for one interval: a host writing in place, in more
        // than one write, is never read half-written (inotify waits for the close; a look cannot).
        // A cart removed is no half-written one: taken at once.
        let name = Posix.info(at: paths.at, paths.cart, follow: false)
        let followed = name?.kind == .symbolicLink ? Posix.info(at: paths.at, paths.cart, follow: true) : name
        let inboxNow = Posix.info(at: paths.at, paths.inbox, follow: false)
        if !isTreeCart || signalNow == nil || inboxNow == nil || signalNow != signal.seen || inboxNow != inbox.seen
            || name != cart.seen || followed != cartFollowed.seen {
            if Posix.info(at: paths.at, directoryPath, follow: false)?.kind != .directory
                || !isTreeCart && Posix.info(at: paths.at, stateDirectory, follow: false)?.kind != .directory {
                return [.directoryGone]
            }
            // Something in the folder changed: its marker too is looked at now (a folder removed
            // and made again between two looks has none, or another cart's).
            if !looksAtSignal {
                looksAtSignal = true
                signalNow = Posix.info(at: paths.signalAt, paths.signal, follow: false)
            }
        }
        let fresh = cart.seen != name || cartFollowed.seen != followed
        let cartChanged = changed(&cart, name)
        let followedChanged = changed(&cartFollowed, followed)
        if fresh, followed != nil {
            cartSettling = true
        } else if cartSettling, !fresh {
            cartSettling = false
            changes.insert(.cart)
        } else if cartChanged || followedChanged {
            changes.insert(.cart)
        }
        if looksAtSignal, changed(&signal, signalNow) { changes.insert(.commit) }
        // Whatever waits there when it changed is taken (a name delivered again after the first
        // was taken is a new delivery): listed only when it changed.
        if changed(&inbox, inboxNow), Posix.listDirectory(newFolder).contains(where: { !$0.hasPrefix(".") }) {
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
