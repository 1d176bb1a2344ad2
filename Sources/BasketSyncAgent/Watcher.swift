import BasketSyncWire
import CInotifyTools
import Glibc

/// Watches the sync directory with libinotifytools, and tells the event loop what changed.
///
/// libinotifytools keeps process-wide state, so one thread owns it: the event loop's, from
/// `inotifytools_initialize` on. The library places the watches and names what a watch
/// descriptor watches (`inotifytools_filename_from_wd`); the loop polls the inotify descriptor
/// itself and reads the events with `read`, so that no thread and no pipe stand between an event
/// and its handling (the library's own `next_event` blocks, and cannot share a `poll`).
///
/// It watches directories, never files, so that a cart replaced by a rename, deleted or
/// re-created is seen; it reacts to close-after-write and rename-into-place only, so that a
/// partial write is never read. It finds what an event is about from its watch descriptor, never
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
        case inbox
        case state
    }

    let directory: String
    private let cartComponents: [String]
    /// The inotify descriptor the library opened, for the event loop to poll.
    let fd: Int32

    private static let directoryMask = Int32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    /// Initializes libinotifytools and places every watch: nothing written after this returns
    /// can be missed.
    init(directory: String, cart: String) throws(AgentError) {
        self.directory = directory
        cartComponents = cart.split(separator: "/").map(String.init)
        guard inotifytools_initialize() != 0 else {
            throw .system(SystemError(operation: "inotify_init", path: directory, code: inotifytools_error()))
        }
        guard let descriptor = Watcher.inotifyDescriptor() else {
            throw .system(SystemError(operation: "find the inotify descriptor", path: "/proc/self/fd", code: ENOENT))
        }
        fd = descriptor
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        watchCartPath()
        let inboxNew = "\(directory)/inbox/new"
        guard inotifytools_watch_file(inboxNew, Int32(IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR)) != 0 else {
            throw .system(SystemError(operation: "watch", path: inboxNew, code: inotifytools_error()))
        }
        _ = inotifytools_watch_file("\(directory)/\(Store.stateDirectoryName)", Int32(IN_CLOSE_WRITE | IN_ONLYDIR))
    }

    /// The library keeps its inotify descriptor to itself: it is the process's one inotify
    /// instance, found among the open descriptors.
    private static func inotifyDescriptor() -> Int32? {
        for name in Posix.listDirectory("/proc/self/fd") {
            guard let number = Int32(name) else { continue }
            var target = [CChar](repeating: 0, count: 64)
            let count = readlink("/proc/self/fd/\(name)", &target, target.count - 1)
            guard count > 0 else { continue }
            let link = String(decoding: target[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if link == "anon_inode:inotify" { return number }
        }
        return nil
    }

    /// Watches every directory from the sync directory down to the cart's, as far as they exist.
    private func watchCartPath() {
        var path = directory
        for component in cartComponents.dropLast() {
            guard inotifytools_watch_file(path, Watcher.directoryMask) != 0 else { return }
            path += "/\(component)"
        }
        _ = inotifytools_watch_file(path, Watcher.directoryMask)
    }

    /// What a watched directory is for, from its path.
    private func role(of watchedPath: String) -> Role? {
        let path = watchedPath.hasSuffix("/") ? String(watchedPath.dropLast()) : watchedPath
        if path == "\(directory)/inbox/new" { return .inbox }
        if path == "\(directory)/\(Store.stateDirectoryName)" { return .state }
        var cartDirectory = directory
        for (index, component) in cartComponents.enumerated() {
            if path == cartDirectory {
                return .cartPath(path: path, next: component, isLast: index == cartComponents.count - 1)
            }
            cartDirectory += "/\(component)"
        }
        return nil
    }

    /// Reads every event waiting on the descriptor (it does not block) and says what changed.
    func changes() throws(AgentError) -> Set<Change> {
        var changes = Set<Change>()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { return changes }
                throw .system(SystemError(operation: "read inotify events", path: directory, code: errno))
            }
            if count == 0 { return changes }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let event = buffer.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self) }
                let length = Int(event.len)
                let name = length == 0 ? "" : String(decoding: buffer[(offset + header)..<(offset + header + length)].prefix { $0 != 0 }, as: UTF8.self)
                handle(event, name: name, into: &changes)
                offset += header + length
            }
        }
    }

    private func handle(_ event: inotify_event, name: String, into changes: inout Set<Change>) {
        let mask = Int32(bitPattern: event.mask)
        if mask & Int32(IN_Q_OVERFLOW) != 0 || event.wd < 0 {
            changes.insert(.overflow)
            return
        }
        guard mask & Int32(IN_IGNORED) == 0, let watched = inotifytools_filename_from_wd(event.wd),
              let role = role(of: String(cString: watched)) else { return }
        switch role {
        case let .cartPath(path, next, isLast):
            if mask & Int32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                // The watch follows a moved directory: drop it, and wait for the path to come back.
                if mask & Int32(IN_MOVE_SELF) != 0 { inotifytools_remove_watch_by_wd(event.wd) }
                changes.insert(path == directory ? .directoryGone : .cart)
                return
            }
            // An open database pins the directory, so its own IN_DELETE_SELF may never come: the
            // state directory leaving it is the sign that the sync directory is going.
            if path == directory, name == Store.stateDirectoryName, mask & Int32(IN_DELETE | IN_MOVED_FROM) != 0 {
                changes.insert(.directoryGone)
                return
            }
            guard name == next else { return }
            if isLast {
                if mask & Int32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) != 0 { changes.insert(.cart) }
            } else if mask & Int32(IN_CREATE | IN_MOVED_TO) != 0 {
                // A directory on the way to the cart came (back): watch it, and read the cart.
                watchCartPath()
                changes.insert(.cart)
            } else if mask & Int32(IN_DELETE | IN_MOVED_FROM) != 0 {
                changes.insert(.cart)
            }
        case .inbox:
            changes.insert(.inbox)
        case .state:
            if name == Store.commitSignalName { changes.insert(.commit) }
        }
    }
}
