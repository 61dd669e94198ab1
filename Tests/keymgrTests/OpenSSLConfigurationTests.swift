import Foundation
import XCTest

/// Whoever starts keymgr cannot make it load code through OpenSSL's environment: a provider named in `OPENSSL_CONF`
/// (or found through `OPENSSL_MODULES`) is never loaded into the process that holds the master key.
final class OpenSSLConfigurationTests: XCTestCase {
    /// A C compiler on PATH: the Swift toolchain's clang, which every build of keymgr has.
    func compiler() throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") {
            for name in ["clang", "cc"] {
                let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent(name)
                if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            }
        }
        // Never missing where keymgr was built: a failure, not a skip.
        return try XCTUnwrap(nil as URL?, "no C compiler on PATH (\(path)): the Swift toolchain's clang is needed")
    }

    func testAProviderNamedInTheEnvironmentIsNeverLoaded() throws {
        let sandbox = try Sandbox()
        let marker = sandbox.root.appendingPathComponent("provider-was-loaded")
        let source = sandbox.root.appendingPathComponent("provider.c")
        // Code that runs as soon as the library is loaded, before OpenSSL even looks for a provider entry point.
        try Data("""
            #include <stdio.h>
            __attribute__((constructor)) static void loaded(void) {
                FILE *f = fopen("\(marker.path)", "w");
                if (f) { fputs("loaded\\n", f); fclose(f); }
            }
            """.utf8).write(to: source)
        let modules = sandbox.root.appendingPathComponent("modules")
        try FileManager.default.createDirectory(at: modules, withIntermediateDirectories: true)
        let library = modules.appendingPathComponent("hostile.so")
        let built = try sandbox.run(try compiler(), ["-shared", "-fPIC", "-o", library.path, source.path])
        XCTAssertEqual(built.status, 0, built.summary)

        func configuration(module: String) throws -> URL {
            let file = sandbox.root.appendingPathComponent("openssl-\(UUID().uuidString).cnf")
            try Data("""
                openssl_conf = openssl_init
                [openssl_init]
                providers = provider_sect
                [provider_sect]
                hostile = hostile_sect
                default = default_sect
                [hostile_sect]
                module = \(module)
                activate = 1
                [default_sect]
                activate = 1

                """.utf8).write(to: file)
            return file
        }
        let byPath = ["OPENSSL_CONF": try configuration(module: library.path).path]
        let byModules = ["OPENSSL_CONF": try configuration(module: "hostile.so").path, "OPENSSL_MODULES": modules.path]
        for environment in [byPath, byModules] {
            for arguments in [["init", "--device-name", "kiosk"] + Sandbox.fastInit, ["bind", "--user", "alice", "--json"],
                              ["sign", "--user", "alice", "--challenge", "c"], ["status"]] {
                let outcome = try sandbox.keymgr(arguments, extraEnvironment: environment)
                XCTAssertEqual(outcome.status, 0, outcome.summary)
                XCTAssertFalse(FileManager.default.fileExists(atPath: marker.path),
                               "keymgr \(arguments[0]) loaded the provider named by \(environment)")
            }
            try FileManager.default.removeItem(at: sandbox.home)
        }
    }

    /// The system's configuration, where an administrator enables FIPS or other providers, is still read: the file
    /// keymgr opens is `openssl.cnf` in the directory `openssl version -d` names, and not the one OPENSSL_CONF names.
    func testTheSystemConfigurationIsReadInstead() throws {
        let sandbox = try Sandbox()
        try sandbox.initialise()
        let version = try sandbox.run(URL(fileURLWithPath: "/usr/bin/openssl"), ["version", "-d"])
        XCTAssertEqual(version.status, 0, version.summary)
        // OPENSSLDIR: "/usr/lib/ssl"
        let directory = try XCTUnwrap(version.stdout.split(separator: "\"").dropFirst().first.map(String.init), version.stdout)
        let named = sandbox.root.appendingPathComponent("named.cnf")
        try Data("openssl_conf = openssl_init\n[openssl_init]\n".utf8).write(to: named)
        let trace = sandbox.root.appendingPathComponent("openat.trace")
        let outcome = try sandbox.run(URL(fileURLWithPath: "/usr/bin/strace"),
                                      ["-f", "-e", "trace=openat", "-o", trace.path, Sandbox.binary.path, "--home", sandbox.home.path, "status"],
                                      extraEnvironment: ["OPENSSL_CONF": named.path])
        XCTAssertEqual(outcome.status, 0, outcome.summary)
        let opened = String(decoding: try Data(contentsOf: trace), as: UTF8.self)
        XCTAssertTrue(opened.contains("\"\(directory)/openssl.cnf\""), "the system configuration was not read: \(opened)")
        XCTAssertFalse(opened.contains(named.path), "the configuration OPENSSL_CONF names was read")
    }
}
