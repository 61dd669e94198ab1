import XCTest

final class PlaceholderRefServerTests: XCTestCase {}
