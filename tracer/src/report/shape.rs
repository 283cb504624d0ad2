//! The shape check of the typed reader (`read_typed`): the typed report is
//! serialized into a walker that follows the JSON it was read from, and a
//! struct of the report where the JSON has an array is an error naming the
//! field. serde reads a struct from an array too (its fields in order:
//! `"loss": [1]` would be one ring-buffer drop); the report never writes
//! one. Nothing is built: the walk holds a path and a reference.
use serde::{Serialize, ser};
use serde_json::Value;

type Error = serde_json::Error;

fn fail(at: &str, v: &Value) -> Error {
    ser::Error::custom(format!(
        "`{at}`: is {}, not an object",
        crate::error::cut_middle(&v.to_string(), 60)
    ))
}

/// Checks that wherever `typed` is a struct or map, `read` is not an array.
pub fn check<T: Serialize>(typed: &T, read: &Value) -> Result<(), String> {
    typed
        .serialize(Walk {
            read: Some(read),
            at: String::new(),
        })
        .map_err(|e| e.to_string())
}

/// Where the walk is: the JSON at this place (None: absent there) and its path.
struct Walk<'a> {
    read: Option<&'a Value>,
    at: String,
}

impl<'a> Walk<'a> {
    fn field(&self, key: &str) -> Walk<'a> {
        Walk {
            read: self.read.and_then(|v| v.get(key)),
            at: if self.at.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.at)
            },
        }
    }

    fn object(self) -> Result<Object<'a>, Error> {
        match self.read {
            Some(v @ Value::Array(_)) => Err(fail(&self.at, v)),
            _ => Ok(Object { walk: self, key: None }),
        }
    }

    fn seq(self) -> Seq<'a> {
        Seq { walk: self, i: 0 }
    }
}

struct Object<'a> {
    walk: Walk<'a>,
    /// The key of a map entry, between `serialize_key` and `serialize_value`.
    key: Option<String>,
}

struct Seq<'a> {
    walk: Walk<'a>,
    i: usize,
}

impl Seq<'_> {
    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        let w = Walk {
            read: self.walk.read.and_then(|v| v.get(self.i)),
            at: format!("{}[{}]", self.walk.at, self.i),
        };
        self.i += 1;
        value.serialize(w)
    }
}

macro_rules! leaves {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, _: $t) -> Result<(), Error> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for Walk<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    leaves!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_f32: f32,
        serialize_f64: f64, serialize_char: char, serialize_str: &str, serialize_bytes: &[u8],
        serialize_unit_struct: &'static str);

    fn serialize_none(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self.field(variant))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, v: &'static str, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.field(v).seq())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, Error> {
        self.object()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Object<'a>, Error> {
        self.object()
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, v: &'static str, _: usize) -> Result<Object<'a>, Error> {
        self.field(v).object()
    }
}

macro_rules! seq_impl {
    ($($tr:ident :: $m:ident),*) => {
        $(impl ser::$tr for Seq<'_> {
            type Ok = ();
            type Error = Error;
            fn $m<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                Ok(())
            }
        })*
    };
}
seq_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        // Map keys are strings or numbers in JSON: their text is the key.
        self.key = Some(match serde_json::to_value(key)? {
            Value::String(s) => s,
            other => other.to_string(),
        });
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().unwrap_or_default();
        value.serialize(self.walk.field(&key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self.walk.field(key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self.walk.field(key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Default)]
    struct Loss {
        #[serde(default)]
        drops: u64,
        #[serde(default)]
        lost: u64,
    }

    #[derive(Serialize, serde::Deserialize)]
    struct R {
        loss: Loss,
        rows: Vec<Loss>,
    }

    #[test]
    fn a_struct_read_from_an_array_is_named() {
        let v = serde_json::json!({"loss": [1], "rows": [{"drops": 1}]});
        let r: R = serde_json::from_value(v.clone()).expect("serde reads [1] as a struct");
        assert_eq!(r.loss.drops, 1);
        let e = check(&r, &v).expect_err("refused");
        assert!(e.contains("`loss`: is [1], not an object"), "{e}");
        let v = serde_json::json!({"loss": {"drops": 1}, "rows": [{"drops": 1}, [2, 3]]});
        let r: R = serde_json::from_value(v.clone()).expect("serde reads it");
        let e = check(&r, &v).expect_err("refused");
        assert!(e.contains("`rows[1]`"), "{e}");
        let v = serde_json::json!({"loss": {"drops": 1}, "rows": []});
        let r: R = serde_json::from_value(v.clone()).expect("reads");
        assert!(check(&r, &v).is_ok());
    }
}
