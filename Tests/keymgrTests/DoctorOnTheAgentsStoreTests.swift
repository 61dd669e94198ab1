import Foundation
import XCTest

/// `keymgr doctor` run directly (not through the agent) as root on the agent's store: the store belongs to the
/// agent's account (`keymgr` in the system's user database, here served by nss_wrapper from a passwd file of the
/// test's own), and its master key is keymgr.service's systemd credential, which only that service sees. Neither is
/// a fault; what can be checked is, and the message says how to check the rest.
final class DoctorOnTheAgentsStoreTests: XCTestCase {
    private var sandbox: Sandbox!
    private let agentUID: UInt32 = 4545

    override func setUpWithError() throws {
        try XCTSkipUnless(geteuid() == 0, "root runs doctor on the agent's store")
        sandbox = try Sandbox()
        try sandbox.initialise()
        try sandbox.bind("alice")
    }

    override func tearDownWithError() throws { sandbox = nil }

    /// nss_wrapper's user database with `keymgr` at `keymgrUID` (and a person, 4343), for the keymgr process.
    private func users(keymgrUID: UInt32) throws -> [String: String] {
        let passwd = sandbox.root.appendingPathComponent("passwd"), group = sandbox.root.appendingPathComponent("group")
        try "root:x:0:0:root:/root:/bin/sh\nkeymgr:x:\(keymgrUID):\(keymgrUID):keymgr agent:/nonexistent:/bin/sh\nmallory:x:4343:4343::/nonexistent:/bin/sh\n"
            .write(to: passwd, atomically: true, encoding: .utf8)
        try "root:x:0:\nkeymgr:x:\(keymgrUID):\nmallory:x:4343:\n".write(to: group, atomically: true, encoding: .utf8)
        return ["LD_PRELOAD": "libnss_wrapper.so", "NSS_WRAPPER_PASSWD": passwd.path, "NSS_WRAPPER_GROUP": group.path]
    }

    /// Gives the home and everything in it to `uid`, as the agent's StateDirectory= is.
    private func chownHome(to uid: UInt32) throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: sandbox.home.path)
        for path in [sandbox.home.path] + files.map({ sandbox.home.appendingPathComponent($0).path }) {
            XCTAssertEqual(chown(path, uid, uid), 0, path)
        }
    }

    private func doctor(_ environment: [String: String], file: StaticString = #filePath, line: UInt = #line) throws
        -> (status: Int32, checks: [String: [String: Any]]) {
        let outcome = try sandbox.keymgr(["doctor", "--json"], extraEnvironment: environment)
        let checks = try XCTUnwrap(try outcome.object(file: file, line: line)["checks"] as? [[String: Any]], outcome.summary,
                                   file: file, line: line)
        return (outcome.status, Dictionary(uniqueKeysWithValues: checks.map { ($0["name"] as? String ?? "?", $0) }))
    }

    private func said(_ check: [String: Any]?) -> String { (check?["message"] as? String ?? "") + " | " + (check?["fix"] as? String ?? "") }

    func testRootAcceptsAStoreOwnedByTheAgentsAccountAndNoOtherUID() throws {
        try chownHome(to: agentUID)
        let (status, checks) = try doctor(try users(keymgrUID: agentUID))
        XCTAssertEqual(status, 0, "\(checks)")
        XCTAssertEqual(checks["store.files"]?["ok"] as? Bool, true, "\(checks)")
        XCTAssertTrue(said(checks["store.files"]).contains("the agent's user's (keymgr, uid \(agentUID))"), "\(checks)")
        XCTAssertEqual(checks["store.schema"]?["ok"] as? Bool, true, "\(checks)")
        XCTAssertEqual(checks["masterKey"]?["ok"] as? Bool, true, "\(checks)")

        // The same store, when the agent's account is another uid: 4545 is just another user, who could change it.
        let (refused, named) = try doctor(try users(keymgrUID: agentUID + 1))
        XCTAssertEqual(refused, 1, "\(named)")
        XCTAssertEqual(named["store.files"]?["ok"] as? Bool, false, "\(named)")
        XCTAssertTrue(said(named["store.files"]).contains("belongs to uid \(agentUID)"), "\(named)")
        XCTAssertTrue(said(named["store.files"]).contains("chown keymgr"), "\(named)")
    }

    /// Root writing the agent's store directly leaves every file of the home the agent's account's, the writers' queue
    /// it had to create too (as SQLite does for the -wal and -shm files), so the agent's account still writes after it.
    func testAWriteByRootLeavesEveryFileOfTheHomeToTheAgentsAccount() throws {
        let environment = try users(keymgrUID: agentUID)
        try chownHome(to: agentUID)
        let queue = sandbox.home.appendingPathComponent("keymgr.db-lock")
        try? FileManager.default.removeItem(at: queue)  // as a first write by root finds it
        let bound = try sandbox.keymgr(["bind", "--user", "bob"], extraEnvironment: environment)
        XCTAssertEqual(bound.status, 0, bound.summary)
        XCTAssertTrue(FileManager.default.fileExists(atPath: queue.path), "root's write queued on keymgr.db-lock")
        for name in try FileManager.default.contentsOfDirectory(atPath: sandbox.home.path) {
            var info = stat()
            XCTAssertEqual(lstat(sandbox.home.appendingPathComponent(name).path, &info), 0, name)
            XCTAssertEqual(info.st_uid, agentUID, "\(name) belongs to uid \(info.st_uid) after root's write")
            XCTAssertEqual(info.st_gid, agentUID, "\(name) has group \(info.st_gid) after root's write")
        }
        // The agent's account writes its store afterwards (run directly, as that uid, on the same home).
        let agent = try sandbox.run(URL(fileURLWithPath: "/usr/bin/setpriv"),
                                    ["--reuid=\(agentUID)", "--regid=\(agentUID)", "--clear-groups", Sandbox.binary.path,
                                     "--home", sandbox.home.path, "bind", "--user", "carol"])
        XCTAssertEqual(agent.status, 0, agent.summary)
    }

    /// The installed keymgr.service (in a unit directory of the test's own, SYSTEMD_UNIT_PATH) serving this home with
    /// the master key as a credential from `source`.
    private func installUnit(credential directive: String, source: URL, home: URL? = nil, in name: String = "units") throws
        -> [String: String] {
        let units = sandbox.root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: units, withIntermediateDirectories: true)
        try """
            [Service]
            User=keymgr
            ExecStart=/usr/libexec/keymgr-core agent --home \((home ?? sandbox.home).path) --idle-exit 300
            \(directive)=keymgr.master:\(source.path)
            StateDirectory=keymgr

            """.write(to: units.appendingPathComponent("keymgr.service"), atomically: true, encoding: .utf8)
        return ["SYSTEMD_UNIT_PATH": units.path]
    }

    func testTheAgentsCredentialIsCheckedWhereTheUnitLoadsItFromNeverCalledMissing() throws {
        // The master key leaves the home for the credential store, as on an installed device.
        let store = sandbox.root.appendingPathComponent("credstore")
        try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
        let source = store.appendingPathComponent("keymgr.master")
        try FileManager.default.moveItem(at: sandbox.home.appendingPathComponent("master.key"), to: source)
        chmod(source.path, 0o600)
        let environment = try installUnit(credential: "LoadCredential", source: source)

        let (status, checks) = try doctor(environment)
        XCTAssertEqual(status, 0, "\(checks)")
        let seen = said(checks["masterKey"])
        XCTAssertEqual(checks["masterKey"]?["ok"] as? Bool, true, seen)
        XCTAssertTrue(seen.contains(source.path) && seen.contains("LoadCredential="), seen)
        XCTAssertTrue(seen.contains("run `keymgr doctor` through the agent as an administrator"), seen)
        XCTAssertFalse(seen.contains("missing"), seen)

        // Readable by others: named, with what to do.
        chmod(source.path, 0o644)
        let (readable, exposed) = try doctor(environment)
        XCTAssertEqual(readable, 1, "\(exposed)")
        XCTAssertTrue(said(exposed["masterKey"]).contains("mode 644") && said(exposed["masterKey"]).contains("chmod 600 \(source.path)"),
                      said(exposed["masterKey"]))
        chmod(source.path, 0o600)

        // Through the agent (its worker has the service's $CREDENTIALS_DIRECTORY): the key is there and opens the store.
        let harness = try AgentHarness(initialise: false)
        defer { harness.stop() }
        try? FileManager.default.removeItem(at: harness.sandbox.home)
        try FileManager.default.copyItem(at: sandbox.home, to: harness.sandbox.home)
        try harness.start(environment: ["CREDENTIALS_DIRECTORY": store.path])
        let served = try harness.request(["doctor", "--json"])
        let through = try XCTUnwrap(try served.object()["checks"] as? [[String: Any]], served.summary)
        let key = try XCTUnwrap(through.first { $0["name"] as? String == "masterKey" }, served.stdout)
        XCTAssertEqual(key["ok"] as? Bool, true, "\(key)")
        XCTAssertTrue(said(key).contains("systemd-credential") && said(key).contains("opens this store"), "\(key)")

        // Gone from where the unit loads it: the agent could not start, and that is what is said.
        try FileManager.default.removeItem(at: source)
        let (missing, gone) = try doctor(environment)
        XCTAssertEqual(missing, 1, "\(gone)")
        XCTAssertTrue(said(gone["masterKey"]).contains("\(source.path)") && said(gone["masterKey"]).contains("does not exist"),
                      said(gone["masterKey"]))
        XCTAssertTrue(said(gone["masterKey"]).contains("systemd-creds encrypt --name=keymgr.master"), said(gone["masterKey"]))
    }

    func testAnEncryptedCredentialOthersCouldReplaceIsNamedAndAUnitForAnotherHomeChangesNothing() throws {
        let source = sandbox.root.appendingPathComponent("keymgr.master.cred")
        try Data("sealed to the host key".utf8).write(to: source)
        chmod(source.path, 0o666)
        try FileManager.default.removeItem(at: sandbox.home.appendingPathComponent("master.key"))
        var environment = try installUnit(credential: "LoadCredentialEncrypted", source: source)
        let (status, checks) = try doctor(environment)
        XCTAssertEqual(status, 1, "\(checks)")
        XCTAssertTrue(said(checks["masterKey"]).contains("could replace it") && said(checks["masterKey"]).contains("LoadCredentialEncrypted="),
                      said(checks["masterKey"]))

        // A unit that serves another home says nothing of this one: its key is missing.
        environment = try installUnit(credential: "LoadCredentialEncrypted", source: source,
                                      home: sandbox.root.appendingPathComponent("elsewhere"), in: "other-units")
        let (other, plain) = try doctor(environment)
        XCTAssertEqual(other, 1, "\(plain)")
        XCTAssertTrue(said(plain["masterKey"]).contains("missing at \(sandbox.home.appendingPathComponent("master.key").path)"),
                      said(plain["masterKey"]))
    }
}
