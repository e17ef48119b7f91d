"""Stand-in for the expecttest package, which torch's test utilities import and Debian does not
package. torch.testing._internal.common_utils needs ACCEPT and a TestCase base class; the
distributed suite never calls assertExpected*, so those refuse rather than pass."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, *args, **kwargs):
        raise unittest.SkipTest("expecttest is not installed (only a stand-in is)")

    assertExpected = assertExpectedInline
    assertExpectedRaisesInline = assertExpectedInline
