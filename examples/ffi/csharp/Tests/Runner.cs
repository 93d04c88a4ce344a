using System;
using System.Linq;
using System.Reflection;

namespace Kvcache.Tests
{
    /// <summary>Marks a public static method without parameters as a test.</summary>
    [AttributeUsage(AttributeTargets.Method)]
    sealed class TestAttribute : Attribute { }

    /// <summary>Runs every [Test] of this assembly (or those whose name contains an argument).</summary>
    static class Runner
    {
        static int Main(string[] filters)
        {
            var tests = typeof(Runner).Assembly.GetTypes()
                .SelectMany(t => t.GetMethods(BindingFlags.Public | BindingFlags.Static))
                .Where(m => m.IsDefined(typeof(TestAttribute), false))
                .Select(m => new { Method = m, Name = m.DeclaringType.Name + "." + m.Name })
                .Where(t => filters.Length == 0 || filters.Any(f => t.Name.Contains(f)))
                .OrderBy(t => t.Name, StringComparer.Ordinal)
                .ToList();
            int passed = 0, failed = 0;
            foreach (var test in tests) {
                try {
                    test.Method.Invoke(null, null);
                    passed++;
                    Console.WriteLine("ok   " + test.Name);
                } catch (TargetInvocationException e) {
                    failed++;
                    Console.WriteLine("FAIL " + test.Name + ": " + e.InnerException);
                }
            }
            if (tests.Count == 0) {
                Console.WriteLine("no test matched");
                failed = 1;
            }
            Console.WriteLine(passed + " passed, " + failed + " failed");
            return failed == 0 ? 0 : 1;
        }
    }
}
