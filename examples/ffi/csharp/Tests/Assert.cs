using System;

namespace Kvcache.Tests
{
    sealed class AssertionException : Exception
    {
        public AssertionException(string message) : base(message) { }
    }

    static class Assert
    {
        public static void True(bool condition, string what)
        {
            if (!condition) throw new AssertionException(what);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!Equals(expected, actual))
                throw new AssertionException(what + ": expected " + expected + ", got " + actual);
        }

        public static void Contains(string expected, string actual, string what)
        {
            if (actual == null || !actual.Contains(expected))
                throw new AssertionException(what + ": expected text containing '" + expected + "', got '" + actual + "'");
        }

        public static void Sequence<T>(T[] expected, T[] actual, string what)
        {
            Equal(expected.Length, actual.Length, what + " length");
            for (int i = 0; i < expected.Length; i++)
                if (!Equals(expected[i], actual[i]))
                    throw new AssertionException(what + "[" + i + "]: expected " + expected[i] + ", got " + actual[i] +
                                                 " (expected [" + string.Join(", ", expected) + "], got [" +
                                                 string.Join(", ", actual) + "])");
        }

        /// <summary>Elementwise |expected - actual| &lt;= tolerance * (1 + |expected|).</summary>
        public static void Near(float[] expected, float[] actual, float tolerance, string what)
        {
            Equal(expected.Length, actual.Length, what + " length");
            for (int i = 0; i < expected.Length; i++)
                if (!(Math.Abs(expected[i] - actual[i]) <= tolerance * (1 + Math.Abs(expected[i]))))
                    throw new AssertionException(what + "[" + i + "]: expected " + expected[i] + ", got " + actual[i]);
        }

        /// <summary>Runs <paramref name="call"/>, which must throw <typeparamref name="T"/>; returns it.</summary>
        public static T Throws<T>(Action call, string what) where T : Exception
        {
            try {
                call();
            } catch (T e) {
                return e;
            }
            throw new AssertionException(what + ": expected " + typeof(T).Name + ", nothing was thrown");
        }

        /// <summary>Runs <paramref name="call"/>, which must fail with <paramref name="code"/>; returns the exception.</summary>
        public static KvcacheException Fails(StatusCode code, Action call, string what)
        {
            KvcacheException e = Throws<KvcacheException>(call, what);
            Equal(code, e.Code, what + ": code (message: " + e.Message + ")");
            True(e.Message.Length > 0, what + ": the library's message is empty");
            return e;
        }
    }
}
