import BasketSyncWire

/// A tree's root opened once for the looks of its polled carts: each cart's folder is opened
/// from it (`O_PATH`) and held while the root's share of descriptors lasts, so that a look
/// stats `cart.json` and `inbox/new` from the folder — one or two names for the kernel to walk
/// instead of two or three from the root (measured on the bare calls: 0.050 → 0.031–0.044 of a
/// core for 10,000 carts at 1 s, the kernel's time being mostly its name lookups). A cart
/// beyond that share is reached from
/// the root (`ID/cart.json`). The root's path is asked once a look: a root put in its place is
/// followed as its path would be.
final class PollRoot {
    let path: String
    private(set) var fd: Int32
    private var device: UInt64 = 0, inode: UInt64 = 0
    /// How many more carts' folders may be held open (the agent's share of descriptors for them).
    var foldersLeft: Int

    /// Nil when the root cannot be opened (the looks then go by path). `folders`: how many carts'
    /// folders may be held open.
    init?(_ path: String, folders: Int = 0) {
        self.path = path
        fd = -1
        foldersLeft = folders
        guard reopen() else { return nil }
    }

    deinit { if fd >= 0 { Posix.close(fd) } }

    private var sharedNames: [String: PollNames] = [:]

    /// The names of a tree cart's files from its folder, for the cart named `cart`.
    func names(cart: String) -> PollNames {
        if let names = sharedNames[cart] { return names }
        let names = PollNames(cart: cart, signal: Layout.cartMarker, inbox: "inbox/new")
        sharedNames[cart] = names
        return names
    }

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

/// The files a poller stats, as C strings made once: shared by the tree carts whose folders are
/// held (the same names from each folder), so that a look makes none and touches no cart's own.
final class PollNames {
    let cart: UnsafeMutablePointer<CChar>
    let signal: UnsafeMutablePointer<CChar>
    let inbox: UnsafeMutablePointer<CChar>

    init(cart: String, signal: String, inbox: String) {
        self.cart = Posix.cString(cart)
        self.signal = Posix.cString(signal)
        self.inbox = Posix.cString(inbox)
    }

    deinit {
        Posix.freeCString(cart)
        Posix.freeCString(signal)
        Posix.freeCString(inbox)
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
        var signalAt: Int32
        var names: PollNames
    }
    private var paths: Paths
    /// The folder itself and (a sync directory) its `.basket-sync/`, from `paths.at` — a tree
    /// cart's folder from its root.
    private let directoryPath: [CChar]
    private let stateDirectory: [CChar]
    private let newFolder: String
    /// A tree cart's id under its root, its cart's name, and its folder held open while the
    /// root's share of descriptors lasts (-1: its files are reached from the root). A folder
    /// held is what its name gave when it was opened: ``checkFolder()`` opens it again when its
    /// name gives another (the root listed again after it changed, an inotify overflow).
    private let id: String?
    private var cartName: String
    private var folder: Int32 = -1
    private var folderDevice: UInt64 = 0, folderInode: UInt64 = 0

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
        cartName = cart
        // A tree cart reached from its root by its id; anything else by its whole path.
        let root = root.flatMap { root in isTreeCart && directory.hasPrefix(root.path + "/") ? root : nil }
        self.root = root
        id = root.map { String(directory.dropFirst($0.path.count + 1)) }
        if let root, let id {
            directoryPath = Array(id.utf8CString)
            stateDirectory = Array("\(id)/\(Layout.stateDirectory)".utf8CString)
            paths = Paths(at: root.fd, signalAt: root.fd, names: root.names(cart: cart))
        } else {
            let at = Posix.reachedAsCString(directory).at
            func path(_ rest: String?) -> String { Posix.reached(rest.map { "\(directory)/\($0)" } ?? directory).relative }
            directoryPath = Array(path(nil).utf8CString)
            stateDirectory = Array(path(Layout.stateDirectory).utf8CString)
            let signal = isTreeCart ? (at, path(Layout.cartMarker)) : Posix.reached("\(databaseDirectory ?? "\(directory)/\(Layout.stateDirectory)")/\(Layout.commitSignal)")
            paths = Paths(at: at, signalAt: signal.0, names: PollNames(cart: path(cart), signal: signal.1, inbox: path("inbox/new")))
        }
        newFolder = "\(directory)/inbox/new"
        looksToMarker = (directory.hashValue % Poller.markerRounds + Poller.markerRounds) % Poller.markerRounds
        openFolder()
        _ = look()
        (self.cart.until, cartFollowed.until, self.signal.until, inbox.until) = (0, 0, 0, 0)
        cartSettling = false
    }

    deinit {
        if folder >= 0 {
            Posix.close(folder)
            root?.foldersLeft += 1
        }
    }

    /// A tree cart's folder opened from its root and held (while the root's share lasts), and
    /// the paths of its files from it; from the root when it is not held.
    private func openFolder() {
        guard let root, let id else { return }
        if folder >= 0 {
            Posix.close(folder)
            folder = -1
            root.foldersLeft += 1
        }
        if root.foldersLeft > 0, let (fd, info) = Posix.openFolderPath(at: root.fd, id) {
            folder = fd
            (folderDevice, folderInode) = (info.device, info.inode)
            root.foldersLeft -= 1
        }
        let at = folder >= 0 ? folder : root.fd
        let names = folder >= 0 ? root.names(cart: cartName) : PollNames(cart: "\(id)/\(cartName)", signal: "\(id)/\(Layout.cartMarker)", inbox: "\(id)/inbox/new")
        paths = Paths(at: at, signalAt: at, names: names)
    }

    /// The folder held is still what the cart's name gives, else it is opened again (or its
    /// files are reached from the root while the name gives nothing): called when the root
    /// may have changed under its carts — a polled root listed again, an inotify overflow.
    func checkFolder() {
        guard let root, id != nil else { return }
        let now = Posix.info(at: root.fd, directoryPath, follow: false)
        if folder >= 0, let now, now.kind == .directory, now.device == folderDevice, now.inode == folderInode { return }
        if folder < 0, now?.kind != .directory || root.foldersLeft == 0 { return }
        openFolder()
    }

    /// Follows a new cart path (a SIGHUP changed `"cart"`): read at the next look.
    func follow(cart: String) {
        cartName = cart
        if root != nil {
            openFolder()
        } else {
            paths.names = PollNames(cart: Posix.reached("\(directory)/\(cart)").relative, signal: String(cString: paths.names.signal), inbox: String(cString: paths.names.inbox))
        }
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
        // The root as opened now (opened again when its path names another), for what is
        // reached from it.
        let base = root?.fd ?? paths.at
        if let root, folder < 0 {
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
        var signalNow = looksAtSignal ? Posix.info(at: paths.signalAt, paths.names.signal, follow: false) : signal.seen
        // The cart as a name, and what a link there points to (followSymlinks). A cart that
        // changed is taken once it stood still for one interval: a host writing in place, in more
        // than one write, is never read half-written (inotify waits for the close; a look cannot).
        // A cart removed is no half-written one: taken at once; nor is one found replaced by
        // another file at two looks in a row: taken at the second.
        var name = Posix.info(at: paths.at, paths.names.cart, follow: false)
        var inboxNow = Posix.info(at: paths.at, paths.names.inbox, follow: false)
        // The common look of a tree cart: its cart (not a link), `inbox/new/` and its marker
        // (when looked at) as at the last look, nothing settling — nothing to say.
        if isTreeCart, !cartSettling, let seen = name, seen.kind != .symbolicLink, let inboxSeen = inboxNow,
           now >= cart.until, now >= cartFollowed.until, now >= inbox.until, now >= signal.until,
           seen == cart.seen, seen == cartFollowed.seen, inboxSeen == inbox.seen, !looksAtSignal || signalNow != nil && signalNow == signal.seen {
            return []
        }
        var followed = name?.kind == .symbolicLink ? Posix.info(at: paths.at, paths.names.cart, follow: true) : name
        if !isTreeCart || signalNow == nil || inboxNow == nil || signalNow != signal.seen || inboxNow != inbox.seen
            || name != cart.seen || followed != cartFollowed.seen {
            let named = Posix.info(at: base, directoryPath, follow: false)
            if named?.kind != .directory || !isTreeCart && Posix.info(at: base, stateDirectory, follow: false)?.kind != .directory {
                return [.directoryGone]
            }
            // The folder held is no longer the one its name gives: the files looked at again
            // from the one it gives now.
            if folder >= 0, let named, named.device != folderDevice || named.inode != folderInode {
                openFolder()
                paths = self.paths
                if looksAtSignal { signalNow = Posix.info(at: paths.signalAt, paths.names.signal, follow: false) }
                name = Posix.info(at: paths.at, paths.names.cart, follow: false)
                followed = name?.kind == .symbolicLink ? Posix.info(at: paths.at, paths.names.cart, follow: true) : name
                inboxNow = Posix.info(at: paths.at, paths.names.inbox, follow: false)
            }
            // Something in the folder changed: its marker too is looked at now (a folder removed
            // and made again between two looks has none, or another cart's).
            if !looksAtSignal {
                looksAtSignal = true
                signalNow = Posix.info(at: paths.signalAt, paths.names.signal, follow: false)
            }
        }
        let fresh = cart.seen != name || cartFollowed.seen != followed
        // Changed at this look and the last, and another file than the last look found: a host
        // renaming whole versions into place faster than the looks — each one whole, so the one
        // there is taken now (it is taken again once the cart stands still). One written in
        // place waits until it stands still.
        let replacedAgain = cartSettling && fresh && followed.map { now in
            cartFollowed.seen.map { $0.device != now.device || $0.inode != now.inode } ?? true
        } ?? false
        let cartChanged = changed(&cart, name)
        let followedChanged = changed(&cartFollowed, followed)
        if fresh, followed != nil {
            if replacedAgain { changes.insert(.cart) }
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
        if changed(&inbox, inboxNow), Posix.containsName(in: newFolder, where: { !$0.hasPrefix(".") }) {
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
