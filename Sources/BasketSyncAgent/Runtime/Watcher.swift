
/// Watches the sync directory through ``Inotify`` (libinotifytools), and tells the event loop
/// what changed. It owns the process's one inotify instance, on the event loop's thread.
///
/// It watches directories, never files, so that a cart replaced by a rename, deleted or
/// re-created is seen; it reacts to close-after-write and rename-into-place (and to a cart that
/// appears as anything but a file being written), so that a partial write is never read. It finds what an event is about from its watch descriptor, never
/// from a file name, so that the stale entries the library keeps after `IN_IGNORED` (a directory
/// deleted and re-created) are never used.
final class Watcher {
    /// What changed.
    enum Change: Hashable {
        /// The cart may have a new version (or was deleted, or its directory came back).
        case cart
        /// An event arrived in `inbox/new/`.
        case inbox
        /// Another process committed to the database.
        case commit
        /// The kernel queue overflowed: everything must be read again.
        case overflow
        /// The sync directory itself, or its `.basket-sync/`, was removed or moved away.
        case directoryGone
    }

    private enum Role {
        /// A directory on the way to the cart: `next` is the name of the component inside it
        /// (the next directory, or the cart file in the last one).
        case cartPath(path: String, next: String, isLast: Bool)
        /// `inbox/new/`, or `inbox/tmp/` (`isNew` false).
        case inbox(isNew: Bool)
        /// `inbox/` itself: `new/` or `tmp/` made again there is watched again.
        case inboxParent
        case state
    }

    let directory: String
    private var cartComponents: [String]
    private let inotify: Inotify
    /// A cart of a tree: its commits are signalled by its marker, not in `.basket-sync/`.
    private let isTreeCart: Bool
    /// Where watches are placed from, never through a link: a tree's root (its cart's folder is
    /// the owner's, who may swap it for one), or the sync directory itself.
    private var base: String { isTreeCart ? Posix.dirname(of: directory) : directory }
    /// Where one-shot commands touch their commit signal (a sync directory's, not a tree cart's).
    private let signalDirectory: String
    /// The inotify descriptor, for the event loop to poll.
    var fd: Int32 { inotify.fd }

    private static let directoryMask: InotifyMask = [.closeWrite, .movedTo, .create, .delete, .movedFrom, .deleteSelf, .moveSelf, .onlyDirectory]

    /// Places every watch: nothing written after this returns can be missed.
    convenience init(directory: String, cart: String) throws(AgentError) {
        let inotify: Inotify
        do { inotify = try Inotify(path: directory) } catch { throw .system(error) }
        try self.init(directory: directory, cart: cart, inotify: inotify, isTreeCart: false)
    }

    /// Watches one sync directory (or a cart of a tree) through `inotify`, which other watchers
    /// may share: each handles the events of its own directories (``handle(_:into:delivered:)``).
    /// `databaseDirectory`: where one-shot commands touch their commit signal (the database's
    /// directory; `.basket-sync/` unless `"database"` puts it elsewhere).
    init(directory: String, cart: String, inotify: Inotify, isTreeCart: Bool, databaseDirectory: String? = nil) throws(AgentError) {
        self.directory = directory
        signalDirectory = databaseDirectory ?? "\(directory)/\(Layout.stateDirectory)"
        self.inotify = inotify
        self.isTreeCart = isTreeCart
        cartComponents = cart.split(separator: "/").map(String.init)
        do throws(SystemError) {
            try watchCartPathOrThrow()
            // A cart of a tree is served even when its inbox cannot be watched yet: its passes
            // report what is wrong, and the inbox is watched once it is fixed (below) — but not
            // for want of watches: a cart whose watches cannot all be placed is polled, and
            // what was placed is given back.
            // `inbox/` itself is watched so that `new/` or `tmp/` made again (removed, replaced)
            // under the agent is watched again.
            do throws(SystemError) {
                _ = try inotify.watch("\(directory)/inbox", [.create, .movedTo, .onlyDirectory], leaves: Watcher.inboxLeaves, under: base)
            } catch {
                if !isTreeCart || error.isWatchLimit { throw error }
            }
        } catch {
            if error.isWatchLimit { removeWatches() }
            throw .system(error)
        }
        if !isTreeCart {
            do throws(SystemError) { try inotify.watch(signalDirectory, [.closeWrite, .onlyDirectory]) } catch {
                // Without it, other processes' commits would go unseen: polled instead.
                if error.isWatchLimit {
                    removeWatches()
                    throw .system(error)
                }
            }
        }
    }

    /// What is watched in `inbox/`. A delivery by link() (Python's mailbox.Maildir) shows in
    /// new/ only as a creation; the removal of its temporary file in tmp/ says it is complete,
    /// under the same name. A creation in new/ is taken at once when what it made has another
    /// name or is no file (a link() whose deliverer died before removing its tmp/ name, a hard
    /// link from elsewhere, a FIFO): nothing else would report it — the same rule as the cart's.
    private static let inboxLeaves: [(name: String, mask: InotifyMask)] = [("new", [.movedTo, .closeWrite, .create, .onlyDirectory]), ("tmp", [.delete, .onlyDirectory])]

    /// Whether a name's creation (the cart's, or one in `inbox/new/`) made it whole already: a
    /// name for something complete (another name of a file, or no file) — a file being written
    /// is whole when closed.
    private static func createdWhole(_ path: String) -> Bool {
        guard let info = Posix.info(path, follow: false) else { return false }
        return info.kind != .regular || info.links > 1
    }

    private func watchInbox() throws(SystemError) {
        for leaf in Watcher.inboxLeaves { try inotify.watch("\(directory)/inbox/\(leaf.name)", leaf.mask, under: base) }
    }

    /// How many watches a sync directory (or a tree's cart) takes with the cart at `cart`: its
    /// directories down to the cart's, `inbox/`, `inbox/new` and `inbox/tmp`, and `.basket-sync/`.
    static func watchCount(cart: String, isTreeCart: Bool) -> Int {
        cart.split(separator: "/").count + 3 + (isTreeCart ? 0 : 1)
    }

    /// The names of this directory's watches (the library records a directory's path with a
    /// trailing slash).
    var watchNames: [String] {
        let paths = [directory, "\(directory)/inbox", "\(directory)/inbox/new", "\(directory)/inbox/tmp", signalDirectory]
            + cartComponents.dropLast().indices.map { "\(directory)/" + cartComponents[...$0].joined(separator: "/") }
        return paths.map { inotify.watchDescriptor($0 + "/") != nil ? $0 + "/" : $0 }
    }

    /// Stops watching this directory (its cart ended): each watch still under its name here,
    /// never one another directory's watcher placed since on the same folder (swapped in).
    func removeWatches() {
        for name in watchNames { inotify.removeWatch(named: name) }
    }

    /// Follows a new cart path (a SIGHUP changed `"cart"`): its directories are watched from now on.
    func follow(cart: String) {
        cartComponents = cart.split(separator: "/").map(String.init)
        watchCartPath()
    }

    /// Watches the sync directory itself (it must exist), then the rest of the way to the cart.
    private func watchCartPathOrThrow() throws(SystemError) {
        try inotify.watch(directory, cartComponents.count > 1 ? Watcher.directoryMask : Watcher.cartDirectoryMask, under: base)
        // A cart in the directory itself (the usual case) has no folder below to watch.
        if cartComponents.count > 1 { watchCartPath() }
    }

    /// The cart's own directory (creations too: an `inbox/` made again is watched again).
    private static let cartDirectoryMask = directoryMask

    /// Watches every directory from the sync directory down to the cart's, as far as they exist.
    private func watchCartPath() {
        var path = directory
        for component in cartComponents.dropLast() {
            guard (try? inotify.watch(path, Watcher.directoryMask, under: path == directory ? base : path)) != nil else { return }
            path += "/\(component)"
        }
        // The cart's folder never through a link; the way from it to the cart as configured
        // (followSymlinks may let it pass through one).
        try? inotify.watch(path, Watcher.cartDirectoryMask, under: path == directory ? base : path)
    }

    /// What a watched directory is for, from its path (a trailing slash, as the library names
    /// a directory, is left out). Compared as bytes, without a string made: it runs for every
    /// event.
    private func role(of watchedPath: String) -> Role? {
        var path = watchedPath.utf8[...]
        if path.last == UInt8(ascii: "/") { path = path.dropLast() }
        let own = directory.utf8
        guard path.hasBytePrefix(own) else {
            return path.isBytes(signalDirectory.utf8) ? .state : nil
        }
        let rest = path.dropFirst(own.count)
        if rest.isEmpty {
            // The sync directory (or the tree cart's folder): the first directory on the way to the cart.
            return cartComponents.first.map { .cartPath(path: directory, next: $0, isLast: cartComponents.count == 1) }
        }
        if rest.isBytes("/inbox/new".utf8) { return .inbox(isNew: true) }
        if rest.isBytes("/inbox/tmp".utf8) { return .inbox(isNew: false) }
        if rest.isBytes("/inbox".utf8) { return .inboxParent }
        if path.isBytes(signalDirectory.utf8) { return .state }
        // A directory further on the way to the cart ("cart" with folders in it).
        guard cartComponents.count > 1, rest.first == UInt8(ascii: "/") else { return nil }
        let components = rest.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        guard components.count < cartComponents.count,
              zip(components, cartComponents).allSatisfy({ $0.elementsEqual($1.utf8) }) else { return nil }
        return .cartPath(path: String(decoding: path, as: UTF8.self), next: cartComponents[components.count], isLast: components.count == cartComponents.count - 1)
    }

    /// Reads every event waiting on the descriptor (it does not block) and says what changed,
    /// and the names delivered into `inbox/new/`, in the order they arrived.
    func changes() throws(AgentError) -> (kinds: Set<Change>, delivered: [String]) {
        var changes = Set<Change>()
        var delivered: [String] = []
        do {
            for event in try inotify.events() { handle(event, into: &changes, delivered: &delivered) }
        } catch {
            throw .system(error)
        }
        return (changes, delivered)
    }

    /// Says what one event changed, and the name it delivered into `inbox/new/`, if any.
    /// `watched`: the path of the event's watch, when the caller looked it up already.
    func handle(_ event: InotifyEvent, watched: String? = nil, into changes: inout Set<Change>, delivered: inout [String]) {
        let mask = event.mask
        if mask.contains(.overflow) || event.watch < 0 {
            changes.insert(.overflow)
            return
        }
        guard !mask.contains(.ignored), let watched = watched ?? inotify.path(of: event.watch), let role = role(of: watched) else { return }
        // A file created in `new/` and still being written: its close reports it.
        if case .inbox(isNew: true) = role, mask.isDisjoint(with: [.movedTo, .closeWrite]), mask.contains(.create),
           !Watcher.createdWhole("\(watched)/\(event.name)") {
            return
        }
        handle(event, role: role, into: &changes)
        // A delivery's report, in the order deliveries were made: a rename into `new/` (or a
        // file written there, once closed), or the removal from `tmp/` that completes a
        // `link()` into `new/`. A file closed in `tmp/` is not delivered yet.
        if case let .inbox(isNew) = role, !event.name.isEmpty, !mask.isDisjoint(with: isNew ? [.movedTo, .closeWrite, .create] : [.delete]) {
            delivered.append(event.name)
        }
    }

    private func handle(_ event: InotifyEvent, role: Role, into changes: inout Set<Change>) {
        let mask = event.mask
        let name = event.name
        switch role {
        case let .cartPath(path, next, isLast):
            if !mask.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                // The watch follows a moved directory: drop it, and wait for the path to come back
                // — but not a tree cart's own directory's: its one watch may be another cart's by
                // now (swapped in under that cart's name, watched again there), and the cart's
                // end removes its watches by name (``removeWatches()``).
                if mask.contains(.moveSelf), !(isTreeCart && path == directory) { inotify.removeWatch(event.watch) }
                changes.insert(path == directory ? .directoryGone : .cart)
                return
            }
            // An open database pins the directory, so its own IN_DELETE_SELF may never come: the
            // state directory leaving it is the sign that the sync directory is going.
            if !isTreeCart, path == directory, name == Layout.stateDirectory, !mask.isDisjoint(with: [.delete, .movedFrom]) {
                changes.insert(.directoryGone)
                return
            }
            // inbox/ made again (removed whole, then made): watched again, with what it holds.
            if path == directory, name == "inbox", !mask.isDisjoint(with: [.create, .movedTo]) {
                try? inotify.watch("\(directory)/inbox", [.create, .movedTo, .onlyDirectory], under: base)
                try? watchInbox()
                changes.insert(.inbox)
                return
            }
            // A one-shot command committed for this cart of a tree: it touched the marker. Any
            // other change of the marker's name (removed, renamed, a link or a directory made in
            // its place) is looked at the same way, as a poller sees it: still this cart's?
            if isTreeCart, path == directory, name == Layout.cartMarker, !mask.isDisjoint(with: [.closeWrite, .movedTo, .create, .delete, .movedFrom]) {
                changes.insert(.commit)
                return
            }
            guard name == next else { return }
            if isLast {
                if !mask.isDisjoint(with: [.closeWrite, .movedTo, .delete, .movedFrom]) {
                    changes.insert(.cart)
                } else if mask.contains(.create), Watcher.createdWhole("\(path)/\(name)") {
                    // A cart that appears as a link (symbolic or hard), a FIFO or a folder is
                    // never closed after a write: read at once (and refused as what it is). A
                    // file being written is read when it is closed.
                    changes.insert(.cart)
                }
            } else if !mask.isDisjoint(with: [.create, .movedTo]) {
                // A directory on the way to the cart came (back): watch it, and read the cart.
                watchCartPath()
                changes.insert(.cart)
            } else if !mask.isDisjoint(with: [.delete, .movedFrom]) {
                changes.insert(.cart)
            }
        case .inbox:
            changes.insert(.inbox)
        case .inboxParent:
            if name == "new" || name == "tmp" {
                try? watchInbox()
                changes.insert(.inbox)
            }
        case .state:
            if name == Layout.commitSignal { changes.insert(.commit) }
        }
    }
}
