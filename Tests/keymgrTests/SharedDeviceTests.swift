import Foundation
import XCTest

/// Runs every command of the README's "Deploying on a shared device" under a temporary root directory that
/// stands in for `/`: `useradd --prefix`, the paths under the root, `setpriv` to the new user's uid in place of
/// `runuser` (the user exists only in the root's /etc/passwd), and `systemd-creds` with a host key of its own.
/// `systemd-run` needs systemd as PID 1; the test does what its `LoadCredentialEncrypted=` does instead.
final class SharedDeviceTests: XCTestCase {
    private var sandbox: Sandbox!
    private var root: URL!
    private var uid = ""
    private var gid = ""

    override func setUpWithError() throws {
        guard geteuid() == 0 else {
            throw XCTSkip("the deployment steps need root (useradd --prefix, chown to the service user); run as root")
        }
        sandbox = try Sandbox()
        root = sandbox.root.appendingPathComponent("root")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
    }

    override func tearDown() { sandbox = nil }

    /// The README's section, from its heading to the next one.
    private func section() throws -> String {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let start = try XCTUnwrap(readme.range(of: "\n## Deploying on a shared device\n"), "README has no such section")
        let rest = readme[start.upperBound...]
        return String(rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)])
    }

    /// `path` under the temporary root.
    private func at(_ path: String) -> String { root.path + path }

    private func tool(_ name: String) -> URL {
        for directory in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
            let candidate = URL(fileURLWithPath: directory).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return URL(fileURLWithPath: "/usr/bin").appendingPathComponent(name)
    }

    /// Runs `arguments` (a tool and its arguments) and fails the test unless it exits `status`.
    @discardableResult
    private func step(_ readmeLine: String?, _ arguments: [String], stdin: String = "", environment: [String: String] = [:],
                      status: Int32 = 0, file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        if let readmeLine {
            XCTAssertTrue(try section().contains(readmeLine), "the README no longer says: \(readmeLine)", file: file, line: line)
        }
        let outcome = try sandbox.run(tool(arguments[0]), Array(arguments.dropFirst()), stdin: stdin,
                                      extraEnvironment: environment)
        XCTAssertEqual(outcome.status, status, "\(arguments.joined(separator: " "))\n\(outcome.summary)", file: file, line: line)
        return outcome
    }

    /// `runuser -u keymgr --` for a user that exists only under the temporary root.
    private var asKeymgr: [String] { ["setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups"] }
    private var keymgr: String { Sandbox.binary.path }

    func testTheDeploymentSectionWorksStepByStep() throws {
        // The system user, in a copy of the host's account files.
        try FileManager.default.createDirectory(at: root.appendingPathComponent("etc"), withIntermediateDirectories: true)
        for name in ["passwd", "group", "shadow", "gshadow", "login.defs"] where FileManager.default.fileExists(atPath: "/etc/" + name) {
            try FileManager.default.copyItem(atPath: "/etc/" + name, toPath: at("/etc/" + name))
        }
        try step("useradd --system --user-group --home-dir /var/lib/keymgr --shell /usr/sbin/nologin keymgr",
                 ["useradd", "--prefix", root.path, "--system", "--user-group", "--home-dir", "/var/lib/keymgr",
                  "--shell", "/usr/sbin/nologin", "keymgr"])
        let passwd = try String(contentsOfFile: at("/etc/passwd"), encoding: .utf8)
        let entry = try XCTUnwrap(passwd.split(separator: "\n").first { $0.hasPrefix("keymgr:") })
            .split(separator: ":", omittingEmptySubsequences: false)
        (uid, gid) = (String(entry[2]), String(entry[3]))
        XCTAssertNotEqual(uid, "0")
        XCTAssertEqual(String(entry[5]), "/var/lib/keymgr")

        // The store, made by the service user.
        try step("install -d -m 0700 -o keymgr -g keymgr /var/lib/keymgr",
                 ["install", "-d", "-m", "0700", "-o", uid, "-g", gid, at("/var/lib/keymgr")])
        try step(#"runuser -u keymgr -- env KEYMGR_HOME=/var/lib/keymgr keymgr init --device-name "kiosk 7""#,
                 asKeymgr + ["env", "KEYMGR_HOME=" + at("/var/lib/keymgr"), keymgr, "init", "--device-name", "kiosk 7"]
                    + Sandbox.fastInit)
        let masterKey = at("/var/lib/keymgr/master.key")
        let attributes = try FileManager.default.attributesOfItem(atPath: masterKey)
        XCTAssertEqual((attributes[.ownerAccountID] as? NSNumber)?.stringValue, uid, "init ran as the service user")

        // The master key into an encrypted credential, with a host key of this test's own.
        try FileManager.default.createDirectory(atPath: at("/var/lib/systemd"), withIntermediateDirectories: true)
        let credentials = ["SYSTEMD_CREDENTIAL_SECRET": at("/var/lib/systemd/credential.secret")]
        try step("install -d -m 0700 /etc/credstore.encrypted", ["install", "-d", "-m", "0700", at("/etc/credstore.encrypted")])
        try step("systemd-creds encrypt --name=keymgr.master /var/lib/keymgr/master.key /etc/credstore.encrypted/keymgr.master",
                 ["systemd-creds", "encrypt", "--name=keymgr.master", masterKey, at("/etc/credstore.encrypted/keymgr.master")],
                 environment: credentials)
        let encrypted = try Data(contentsOf: URL(fileURLWithPath: at("/etc/credstore.encrypted/keymgr.master")))
        let plain = try Data(contentsOf: URL(fileURLWithPath: masterKey))
        XCTAssertNil(encrypted.range(of: plain), "the credential holds the master key in clear")
        try step("shred -u /var/lib/keymgr/master.key", ["shred", "-u", masterKey])
        XCTAssertFalse(FileManager.default.fileExists(atPath: masterKey))

        // The plain key is gone: the store no longer opens without the credential.
        let home = "KEYMGR_HOME=" + at("/var/lib/keymgr")
        try step(nil, asKeymgr + ["env", home, keymgr, "status", "--json"], status: 78)

        // What `systemd-run -p User=keymgr -p LoadCredentialEncrypted=keymgr.master:… -E KEYMGR_HOME=…` does:
        // decrypt into a directory only the service user can read, and point CREDENTIALS_DIRECTORY at it.
        let systemdRun = "systemd-run --quiet --pipe --wait --collect -p User=keymgr -p LoadCredentialEncrypted=keymgr.master:/etc/credstore.encrypted/keymgr.master -E KEYMGR_HOME=/var/lib/keymgr /usr/local/bin/keymgr status"
        XCTAssertTrue(try section().contains(systemdRun))
        let credentialsDirectory = at("/run/credentials/run-keymgr.service")
        try step(nil, ["install", "-d", "-m", "0500", "-o", uid, "-g", gid, credentialsDirectory])
        try step(nil, ["systemd-creds", "decrypt", "--name=keymgr.master", at("/etc/credstore.encrypted/keymgr.master"),
                       credentialsDirectory + "/keymgr.master"], environment: credentials)
        try step(nil, ["chown", "\(uid):\(gid)", credentialsDirectory + "/keymgr.master"])
        try step(nil, ["chmod", "0400", credentialsDirectory + "/keymgr.master"])
        let service = asKeymgr + ["env", home, "CREDENTIALS_DIRECTORY=" + credentialsDirectory, keymgr]
        let status = try step(nil, service + ["status", "--json"])
        XCTAssertEqual(try status.object()["deviceName"] as? String, "kiosk 7")
        XCTAssertTrue(try section().contains("/usr/local/bin/keymgr bind --user alice --auth-type app-pin --pin-stdin"))
        try step(nil, service + ["bind", "--user", "alice", "--auth-type", "app-pin", "--pin-stdin", "--json"], stdin: "482916\n")
        XCTAssertTrue(try section().contains(#"/usr/local/bin/keymgr sign --user alice --challenge "$CHALLENGE" --pin-stdin"#))
        let signed = try step(nil, service + ["sign", "--user", "alice", "--challenge", "c-1234", "--pin-stdin", "--json"],
                              stdin: "482916\n")
        let jws = try XCTUnwrap(try signed.object()["jws"] as? String, signed.stdout)
        XCTAssertEqual(try jwsParts(jws).payload["challenge"] as? String, "c-1234")

        // The operators' sudo rule, exactly as the README writes it.
        try step("groupadd --system keymgr-operators", ["groupadd", "--prefix", root.path, "--system", "keymgr-operators"])
        let text = try section()
        let heredoc = try XCTUnwrap(text.range(of: "cat > /etc/sudoers.d/keymgr <<'SUDOERS'\n"))
        let heredocEnd = try XCTUnwrap(text.range(of: "\nSUDOERS\n", range: heredoc.upperBound..<text.endIndex))
        let sudoers = String(text[heredoc.upperBound..<heredocEnd.lowerBound]) + "\n"
        XCTAssertTrue(sudoers.contains("/usr/local/bin/keymgr sign*"), sudoers)
        XCTAssertFalse(sudoers.contains("keymgr init"), "operators must not init stores as the service user")
        try FileManager.default.createDirectory(atPath: at("/etc/sudoers.d"), withIntermediateDirectories: true)
        try sudoers.write(toFile: at("/etc/sudoers.d/keymgr"), atomically: true, encoding: .utf8)
        try step("chmod 0440 /etc/sudoers.d/keymgr", ["chmod", "0440", at("/etc/sudoers.d/keymgr")])
        try step("visudo -cf /etc/sudoers.d/keymgr", ["visudo", "-cf", at("/etc/sudoers.d/keymgr")])

        // Without systemd-run: a file root writes and only the service user's group reads.
        try step("install -d -m 0750 -o root -g keymgr /etc/keymgr",
                 ["install", "-d", "-m", "0750", "-o", "root", "-g", gid, at("/etc/keymgr")])
        try step("systemd-creds decrypt --name=keymgr.master /etc/credstore.encrypted/keymgr.master /etc/keymgr/master.key",
                 ["systemd-creds", "decrypt", "--name=keymgr.master", at("/etc/credstore.encrypted/keymgr.master"),
                  at("/etc/keymgr/master.key")], environment: credentials)
        try step("chown root:keymgr /etc/keymgr/master.key && chmod 0440 /etc/keymgr/master.key",
                 ["chown", "root:\(gid)", at("/etc/keymgr/master.key")])
        try step(nil, ["chmod", "0440", at("/etc/keymgr/master.key")])
        let viaFile = try step(
            "runuser -u keymgr -- env KEYMGR_HOME=/var/lib/keymgr KEYMGR_MASTER_KEY_FILE=/etc/keymgr/master.key keymgr status",
            asKeymgr + ["env", home, "KEYMGR_MASTER_KEY_FILE=" + at("/etc/keymgr/master.key"), keymgr, "status", "--json"])
        XCTAssertEqual(try viaFile.object()["keys"] as? Int, 1, viaFile.stdout)
    }
}
