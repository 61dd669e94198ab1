import Foundation
import GRDB
import KeyManager
@testable import Storage
import XCTest

/// A fresh temporary directory per test, removed afterwards.
class StorageTestCase: XCTestCase {
    var scratch: URL!

    override func setUpWithError() throws {
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("keymgr-storage-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        chmod(scratch.path, 0o700)
    }

    override func tearDownWithError() throws {
        if let scratch { try? FileManager.default.removeItem(at: scratch) }
    }

    var home: StoreHome { StoreHome(url: scratch.appendingPathComponent("home")) }

    func openStore(create: Bool = true) throws -> Store {
        try Store.open(home: home, create: create, digest: SHA256.hash)
    }

    /// A raw connection that bypasses the store's rules, as someone editing the file would.
    func rawConnection() throws -> DatabaseQueue {
        try DatabaseQueue(path: home.databaseURL.path)
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0, "stat \(path)")
        return info.st_mode & 0o777
    }
}
