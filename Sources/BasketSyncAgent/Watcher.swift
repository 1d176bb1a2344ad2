import CInotifyTools
import Glibc

/// Watches the sync directory with libinotifytools on a thread of its own, and tells the event
/// loop what changed by writing one byte per event into a pipe.
///
/// libinotifytools keeps process-wide state, so one thread owns it: this one, from
/// `inotifytools_initialize` on. It watches directories, never files, so that a cart replaced by a
/// rename, deleted or re-created is seen; it reacts to close-after-write and rename-into-place only,
/// so that a partial write is never read. It finds what an event is about from its watch
/// descriptor (`inotifytools_filename_from_wd`), never from a file name, so that the stale entries
/// the library keeps after `IN_IGNORED` (a directory deleted and re-created) are never used.
final class Watcher: @unchecked Sendable {
    /// What changed.
    enum Change: UInt8 {
        /// The cart may have a new version (or was deleted, or its directory came back).
        case cart = 1
        /// An event arrived in `inbox/new/`.
        case inbox = 2
        /// Another process committed to the database.
        case commit = 3
        /// The kernel queue overflowed: everything must be read again.
        case overflow = 4
        /// The sync directory itself, or its `.basket-sync/`, was removed or moved away.
        case directoryGone = 5
        /// The watcher cannot go on (its message is in the log).
        case failed = 6
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
    private let logger: Logger
    private let pipeWrite: Int32
    /// The end of the pipe that the event loop polls.
    let pipeRead: Int32

    private static let directoryMask = Int32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_MOVED_FROM
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    init(directory: String, cart: String, logger: Logger) throws(AgentError) {
        self.directory = directory
        cartComponents = cart.split(separator: "/").map(String.init)
        self.logger = logger
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            throw .system(SystemError(operation: "pipe", path: directory, code: errno))
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        pipeRead = fds[0]
        pipeWrite = fds[1]
    }

    /// Starts the watching thread; returns once every watch is in place, so that nothing written
    /// after `start` returns can be missed.
    func start() throws(AgentError) {
        let ready = UnsafeMutablePointer<sem_t>.allocate(capacity: 1)
        sem_init(ready, 0, 0)
        defer { sem_destroy(ready); ready.deallocate() }
        var failure: AgentError?
        let context = Unmanaged.passRetained(Box(watcher: self, ready: ready, failure: { failure = $0 }))
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            box.watcher.run(box)
            return nil
        }, context.toOpaque())
        guard created == 0 else {
            context.release()
            throw .system(SystemError(operation: "pthread_create", path: directory, code: created))
        }
        pthread_detach(thread)
        while sem_wait(ready) != 0 && errno == EINTR {}
        if let failure { throw failure }
    }

    private final class Box {
        let watcher: Watcher
        let ready: UnsafeMutablePointer<sem_t>
        let failure: (AgentError) -> Void
        init(watcher: Watcher, ready: UnsafeMutablePointer<sem_t>, failure: @escaping (AgentError) -> Void) {
            self.watcher = watcher
            self.ready = ready
            self.failure = failure
        }
    }

    private func send(_ change: Change) {
        var byte = change.rawValue
        // A full pipe already holds a wake-up; the loop reads everything again anyway.
        _ = write(pipeWrite, &byte, 1)
    }

    private func watch(_ path: String, mask: Int32) -> Bool {
        inotifytools_watch_file(path, mask) != 0
    }

    /// Watches every directory from the sync directory down to the cart's, as far as they exist.
    private func watchCartPath() {
        var path = directory
        for component in cartComponents.dropLast() {
            guard watch(path, mask: Watcher.directoryMask) else { return }
            path += "/\(component)"
        }
        _ = watch(path, mask: Watcher.directoryMask)
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

    private func run(_ box: Box) {
        guard inotifytools_initialize() != 0 else {
            box.failure(.system(SystemError(operation: "inotify_init", path: directory, code: inotifytools_error())))
            sem_post(box.ready)
            return
        }
        watchCartPath()
        let inboxNew = "\(directory)/inbox/new"
        if !watch(inboxNew, mask: Int32(IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR)) {
            box.failure(.system(SystemError(operation: "watch", path: inboxNew, code: inotifytools_error())))
            sem_post(box.ready)
            return
        }
        _ = watch("\(directory)/\(Store.stateDirectoryName)", mask: Int32(IN_CLOSE_WRITE | IN_ONLYDIR))
        sem_post(box.ready)

        while true {
            // -1 blocks until an event; 0 would also block (the library maps it to -1).
            guard let event = inotifytools_next_event(-1) else {
                let code = inotifytools_error()
                if code == EINTR || code == 0 { continue }
                logger.log(.error, "\(directory): reading inotify events failed: \(String(cString: strerror(code)))")
                send(.failed)
                return
            }
            handle(event.pointee, name: event.pointee.len > 0 ? inotifyName(event) : "")
        }
    }

    private func inotifyName(_ event: UnsafeMutablePointer<inotify_event>) -> String {
        let raw = UnsafeRawPointer(event).advanced(by: MemoryLayout<inotify_event>.size)
        return String(cString: raw.assumingMemoryBound(to: CChar.self))
    }

    private func handle(_ event: inotify_event, name: String) {
        let mask = Int32(bitPattern: event.mask)
        if mask & Int32(IN_Q_OVERFLOW) != 0 || event.wd < 0 {
            send(.overflow)
            return
        }
        guard mask & Int32(IN_IGNORED) == 0, let watched = inotifytools_filename_from_wd(event.wd),
              let role = role(of: String(cString: watched)) else { return }
        switch role {
        case let .cartPath(path, next, isLast):
            if mask & Int32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                // The watch follows a moved directory: drop it, and wait for the path to come back.
                if mask & Int32(IN_MOVE_SELF) != 0 { inotifytools_remove_watch_by_wd(event.wd) }
                if path == directory { send(.directoryGone) } else { send(.cart) }
                return
            }
            // An open database pins the directory, so its own IN_DELETE_SELF may never come: the
            // state directory leaving it is the sign that the sync directory is going.
            if path == directory, name == Store.stateDirectoryName, mask & Int32(IN_DELETE | IN_MOVED_FROM) != 0 {
                send(.directoryGone)
                return
            }
            guard name == next else { return }
            if isLast {
                if mask & Int32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) != 0 { send(.cart) }
            } else if mask & Int32(IN_CREATE | IN_MOVED_TO) != 0 {
                // A directory on the way to the cart came (back): watch it, and read the cart.
                watchCartPath()
                send(.cart)
            } else if mask & Int32(IN_DELETE | IN_MOVED_FROM) != 0 {
                send(.cart)
            }
        case .inbox:
            send(.inbox)
        case .state:
            if name == Store.commitSignalName { send(.commit) }
        }
    }
}
