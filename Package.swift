// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "basket-sync",
    products: [
        .library(name: "BasketSync", targets: ["BasketSync"]),
        .executable(name: "basket-sync", targets: ["basket-sync"]),
    ],
    targets: [
        // The functional core: the SDK's names and the sync state machine. No I/O, no clock.
        .target(name: "BasketSync"),
        // Pure too: the JSON parser and writer, and each file format's decoder and encoder side by side.
        .target(name: "BasketSyncWire", dependencies: ["BasketSync"]),
        // C libraries from Debian -dev packages, each behind one module map.
        .systemLibrary(name: "CInotifyTools", path: "Sources/CInotifyTools"),
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        .systemLibrary(name: "CStatfs", path: "Sources/CStatfs"),
        // The imperative shell: files, inotify, SQLite, signals.
        .target(name: "BasketSyncAgent", dependencies: ["BasketSync", "BasketSyncWire", "CInotifyTools", "CSQLite", "CMalloc", "CStatfs"]),
        // Argument parsing and command dispatch only.
        .executableTarget(name: "basket-sync", dependencies: ["BasketSyncAgent", "BasketSyncWire", "BasketSync"]),
        // The benchmark: `swift run -c release basket-sync-bench`.
        .executableTarget(name: "basket-sync-bench", dependencies: ["basket-sync"]),
        // Samples/swift-host: a host embedding the library directly.
        .executableTarget(name: "swift-host-sample", dependencies: ["BasketSync"], path: "Samples/swift-host", exclude: ["README.md"]),
        // A seeded generator the seeded tests share.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "BasketSyncTests", dependencies: ["BasketSync", "TestSupport"]),
        .testTarget(name: "BasketSyncWireTests", dependencies: ["BasketSyncWire", "BasketSync", "TestSupport"]),
        .testTarget(name: "BasketSyncAgentTests", dependencies: ["BasketSyncAgent", "BasketSyncWire", "BasketSync", "TestSupport"]),
        .testTarget(name: "CLITests", dependencies: ["basket-sync", "swift-host-sample", "basket-sync-bench", "TestSupport", "CSQLite"]),
    ],
    swiftLanguageModes: [.v6]
)
