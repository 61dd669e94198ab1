// swift-tools-version:6.1
import PackageDescription

import Foundation

let strict: [SwiftSetting] = [.swiftLanguageMode(.v6)]
/// `make fuzz` (proof/fuzz.sh) sets KEYMGR_FUZZ_BUILD=1 for its own scratch path: the parsers' modules get libFuzzer's
/// coverage instrumentation and keymgr-fuzz links libFuzzer. Never set for the normal build.
let fuzzing = ProcessInfo.processInfo.environment["KEYMGR_FUZZ_BUILD"] == "1"
let fuzzed: [SwiftSetting] = strict + (fuzzing ? [.unsafeFlags(["-sanitize=fuzzer"])] : [])

/// Release builds of keymgr-core start faster (docs/output-and-packaging.md, "Start-up"): type metadata reached through
/// accessor functions instead of mangled names the runtime demangles on first use, and a link by lld with relative
/// relocations packed (DT_RELR: the loader applies them in a loop instead of one record each; glibc 2.36 or later)
/// and no symbol exported for a dynamic loader that never looks them up.
let quickStart: [SwiftSetting] = [
    .unsafeFlags(["-Xfrontend", "-disable-concrete-type-metadata-mangled-name-accessors"], .when(configuration: .release)),
]
let quickStartLink: [LinkerSetting] = [
    .unsafeFlags(
        ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic"],
        .when(configuration: .release)),
]

let package = Package(
    name: "keymgr",
    platforms: [.macOS(.v14)],
    products: [
        // `keymgr` is the lean client (agent mode, else it execs keymgr-core); `keymgr-core` is the full program,
        // whose module keeps the name and path `keymgr` (Sources/keymgr).
        .executable(name: "keymgr", targets: ["keymgr-client"]),
        .executable(name: "keymgr-core", targets: ["keymgr"]),
        .executable(name: "keymgr-refserver", targets: ["keymgr-refserver"]),
        .executable(name: "keymgr-benchdata", targets: ["keymgr-benchdata"]),
        .library(name: "KeyManager", targets: ["KeyManager"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        // The agent's policy file (docs/agent-policy.md): TOML 1.0 by toml++ 3.4. Linked into keymgr-core through
        // KeyManager, never into the lean client.
        .package(url: "https://github.com/LebJe/TOMLKit", exact: "0.6.0"),
    ],
    targets: [
        // System libraries: the distribution's libcrypto (OpenSSL 3) and libargon2.
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CArgon2", pkgConfig: "libargon2", providers: [.apt(["libargon2-dev"])]),
        // tpm2-tss (ESYS, the TCTI loader, marshalling, error texts) for keys inside a TPM 2.0; used only from
        // Sources/KeyManager/Crypto, beside libcrypto. The module map links tss2-tctildr, tss2-mu and tss2-rc too.
        .systemLibrary(name: "CTSS2", pkgConfig: "tss2-esys", providers: [.apt(["libtss2-dev"])]),
        // The system libcurl, loaded with dlopen on first network use (headers from libcurl4-openssl-dev).
        .target(name: "CCurl"),
        // sqlite3_db_config, which Swift cannot call (it is variadic), for the store's connections; the pre-update hook;
        // and the filter in front of GRDB's authorizer (keymgr_sqlite_authorizer.c: column reads answered in C).
        .target(name: "CSQLiteOptions", linkerSettings: [.linkedLibrary("sqlite3")]),
        // The agent protocol's socket calls: descriptors with SCM_RIGHTS, SO_PEERCRED, SO_PEERGROUPS, sockaddr_un.
        // Used by the lean client and by the agent; libc only.
        .target(name: "CAgentSocket"),
        // prctl (process names, the agent as subreaper) and the verifier commands' start (PR_SET_PDEATHSIG between
        // fork and exec), which Swift cannot make. libc only.
        .target(name: "CProcessControl"),

        // Build-time embedding of migrations/*.sql into the Storage module.
        .executableTarget(name: "MigrationEmbedder", swiftSettings: strict),
        .plugin(name: "MigrationsPlugin", capability: .buildTool(), dependencies: ["MigrationEmbedder"]),

        // What both sides of the wire need: error codes, JSONValue, Base64URL, JWK and JWS values, token values, the
        // timestamp format, keymgr's own threads. Foundation and AgentWire's JSON writer only: ServerClients and the
        // reference server stand on it without KeyManager (its store, OpenSSL, the TPM).
        .target(name: "KeymgrCore", dependencies: ["AgentWire"], swiftSettings: fuzzed),
        .target(
            name: "Storage",
            dependencies: [.product(name: "GRDB", package: "GRDB.swift"), "CSQLiteOptions", "KeymgrCore"],
            swiftSettings: strict + quickStart,
            plugins: ["MigrationsPlugin"]),
        .target(
            name: "KeyManager",
            dependencies: [
                "KeymgrCore", "AgentWire", "Storage", "COpenSSL", "CArgon2", "CTSS2", "CProcessControl",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "TOMLKit", package: "TOMLKit"),
            ],
            swiftSettings: fuzzed + quickStart),
        // Wire clients: HTTP, PingAM's device REST and journeys, OAuth endpoints. Values in, values out.
        .target(
            name: "ServerClients",
            dependencies: ["KeymgrCore", "CCurl"],
            swiftSettings: fuzzed),
        // Services that combine a wire client with the KeyManager facade: sync, journeys.
        .target(
            name: "Sync",
            dependencies: ["KeyManager", "ServerClients", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        .executableTarget(
            name: "keymgr",
            dependencies: [
                "KeyManager", "Sync", "CAgentSocket", "CProcessControl", "AgentWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict + quickStart,
            linkerSettings: quickStartLink),
        // The agent protocol's frames (docs/agent-protocol.md): a strict JSON reader and writer for exactly the
        // request and response shapes. No Foundation: the lean client links it.
        .target(name: "AgentWire", swiftSettings: fuzzed),
        // The lean client: Glibc, AgentWire and CAgentSocket only (no Foundation, GRDB or OpenSSL).
        // Linked as a static executable in release: no dynamic loader, no relocations of libc and the Swift runtime at
        // each start (docs/output-and-packaging.md). It calls nothing of glibc's that needs NSS or dlopen.
        .executableTarget(
            name: "keymgr-client", dependencies: ["AgentWire", "CAgentSocket"], swiftSettings: strict,
            linkerSettings: [.unsafeFlags(["-static-executable"], .when(configuration: .release))]),

        // The reference identity server: PingAM's device REST and journeys over loopback HTTP.
        .target(
            name: "RefServer",
            dependencies: [
                "KeymgrCore", "COpenSSL",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        .executableTarget(
            name: "keymgr-refserver",
            dependencies: ["RefServer", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strict),

        // Benchmark fixtures (benchmarks/): many users and keys made through the library in one process.
        .executableTarget(
            name: "keymgr-benchdata",
            dependencies: ["KeyManager", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strict),
        // The floor of `keymgr status` on keymgr's stack (benchmarks/status): GRDB, Foundation and libcrypto, no logic.
        .executableTarget(
            name: "keymgr-status-floor",
            dependencies: ["KeyManager", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strict),
        // libFuzzer targets for what keymgr parses from outside; built with fuzzing only by `make fuzz`
        // (proof/fuzz.sh), empty otherwise.
        .executableTarget(
            name: "keymgr-fuzz", dependencies: ["KeyManager", "ServerClients", "Storage", "AgentWire"],
            swiftSettings: fuzzed + (fuzzing ? [.define("KEYMGR_FUZZ")] : []),
            linkerSettings: fuzzing ? [.unsafeFlags(["-sanitize=fuzzer"])] : []),

        // A swtpm of each test's own (a temporary directory, a Unix socket, under `timeout`), for the TPM tests.
        .target(name: "SWTPMSupport", path: "Tests/SWTPMSupport", swiftSettings: strict),
        .testTarget(name: "StorageTests", dependencies: ["Storage", "KeyManager", "KeymgrCore"], swiftSettings: strict),
        .testTarget(name: "KeyManagerTests", dependencies: ["KeyManager", "Storage", "SWTPMSupport"], swiftSettings: strict),
        .testTarget(name: "SyncTests", dependencies: ["Sync", "ServerClients", "KeyManager", "Storage", "RefServer"], swiftSettings: strict),
        .testTarget(name: "ServerClientsTests", dependencies: ["ServerClients", "KeyManager"], swiftSettings: strict),
        .testTarget(name: "RefServerTests", dependencies: ["RefServer", "KeyManager"], swiftSettings: strict),
        .testTarget(
            name: "keymgrTests",
            dependencies: ["keymgr", "keymgr-client", "KeyManager", "Storage", "SWTPMSupport", "AgentWire", "CAgentSocket"],
            swiftSettings: strict),
        .testTarget(name: "AgentWireTests", dependencies: ["AgentWire", "CAgentSocket"], swiftSettings: strict),
    ]
)
