import Foundation
import XCTest

/// The CLI stays thin: it sees the library facades only, never the store's records or a wire client of its own.
final class LayoutTests: XCTestCase {
    private static let cliSources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/keymgr")

    private func cliFiles() throws -> [(name: String, text: String)] {
        let enumerator = FileManager.default.enumerator(at: Self.cliSources, includingPropertiesForKeys: nil)
        var files: [(String, String)] = []
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            files.append((url.lastPathComponent, try String(contentsOf: url, encoding: .utf8)))
        }
        return files
    }

    func testTheCLIImportsNeitherStorageNorTheWireClients() throws {
        let files = try cliFiles()
        XCTAssertGreaterThan(files.count, 10, "found the CLI's sources at \(Self.cliSources.path)")
        for (name, text) in files {
            for forbidden in ["import Storage", "import GRDB", "import ServerClients", "@_exported"] {
                XCTAssertFalse(text.contains(forbidden), "\(name) has `\(forbidden)`")
            }
            for client in ["CurlHTTPClient(", "PingAMDeviceClient(", "PingAMJourneyClient(", "Record("] {
                XCTAssertFalse(text.contains(client), "\(name) constructs \(client)…)")
            }
        }
    }

    /// libtss2 (like libcrypto) is reached only from Sources/KeyManager/Crypto: one place speaks to the TPM.
    func testOnlyTheCryptoLayerImportsLibtss2() throws {
        let sources = Self.cliSources.deletingLastPathComponent()
        let enumerator = FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil)
        var importers: [String] = []
        while let url = enumerator?.nextObject() as? URL {
            guard url.pathExtension == "swift" else { continue }
            let text = try String(contentsOf: url, encoding: .utf8)
            if text.contains("import CTSS2") { importers.append(url.path) }
        }
        XCTAssertFalse(importers.isEmpty, "found TPM.swift under \(sources.path)")
        for path in importers {
            XCTAssertTrue(path.contains("/Sources/KeyManager/Crypto/"), "\(path) imports CTSS2 outside the crypto layer")
        }
    }
}
